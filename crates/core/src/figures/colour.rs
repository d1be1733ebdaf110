//! The colour maps every chart uses (colour-blind safe): the page's SVG charts
//! (`figures/svg.rs`), its canvas views and the CLI's figures read the same tables.

use plotters::style::RGBColor;

/// matplotlib's viridis, 11 anchors.
const VIRIDIS: [[f64; 3]; 11] = [
    [68.0, 1.0, 84.0],
    [72.0, 36.0, 117.0],
    [65.0, 68.0, 135.0],
    [53.0, 95.0, 141.0],
    [42.0, 120.0, 142.0],
    [33.0, 145.0, 140.0],
    [34.0, 168.0, 132.0],
    [68.0, 190.0, 112.0],
    [122.0, 209.0, 81.0],
    [189.0, 223.0, 38.0],
    [253.0, 231.0, 37.0],
];

/// Blue - white - orange (ColorBrewer RdBu blues and PuOr oranges), for signed values.
const DIVERGING: [[f64; 3]; 5] =
    [[33.0, 102.0, 172.0], [146.0, 197.0, 222.0], [247.0, 247.0, 247.0], [253.0, 184.0, 99.0], [230.0, 97.0, 1.0]];

fn interpolate(table: &[[f64; 3]], t: f64) -> [f64; 3] {
    let t = if t.is_finite() { t.clamp(0.0, 1.0) } else { 1.0 };
    let scaled = t * (table.len() - 1) as f64;
    let i = (scaled.floor() as usize).min(table.len() - 2);
    let f = scaled - i as f64;
    let (a, b) = (table[i], table[i + 1]);
    [a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f]
}

/// Sequential: t in [0, 1] (clamped; NaN is the top), as unrounded RGB in 0..=255.
pub fn viridis(t: f64) -> [f64; 3] {
    interpolate(&VIRIDIS, t)
}

/// Diverging: v in [-1, 1], 0 is white.
pub fn diverging(v: f64) -> [f64; 3] {
    interpolate(&DIVERGING, (v + 1.0) / 2.0)
}

/// Rounded to bytes, as every output shows it.
pub fn bytes([r, g, b]: [f64; 3]) -> [u8; 3] {
    [r.round() as u8, g.round() as u8, b.round() as u8]
}

/// A value's colour on one of the maps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ColourMap {
    /// `lo` .. `hi` onto viridis.
    Sequential,
    /// `-limit` .. `+limit` onto the diverging map, white at 0.
    Diverging,
}

/// A colour map with its value range: what a colour bar shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Scale {
    pub map: ColourMap,
    pub lo: f64,
    pub hi: f64,
    /// What the values are (the colour bar's title).
    pub label: String,
}

impl Scale {
    pub fn sequential(lo: f64, hi: f64, label: &str) -> Scale {
        Scale { map: ColourMap::Sequential, lo, hi: if hi > lo { hi } else { lo + 1.0 }, label: label.into() }
    }

    /// Symmetric about 0: `-limit` .. `limit`.
    pub fn diverging(limit: f64, label: &str) -> Scale {
        let limit = if limit.is_finite() && limit > 0.0 { limit } else { 1.0 };
        Scale { map: ColourMap::Diverging, lo: -limit, hi: limit, label: label.into() }
    }

    /// The colour of `v`, rounded to bytes.
    pub fn rgb(&self, v: f64) -> [u8; 3] {
        let t = (v - self.lo) / (self.hi - self.lo);
        bytes(match self.map {
            ColourMap::Sequential => viridis(t),
            ColourMap::Diverging => diverging(2.0 * t - 1.0),
        })
    }

    pub fn colour(&self, v: f64) -> RGBColor {
        let [r, g, b] = self.rgb(v);
        RGBColor(r, g, b)
    }
}

/// Whether dark text reads better than white on `rgb`.
pub fn dark_ink(rgb: [f64; 3]) -> bool {
    (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255.0 > 0.5
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_map_their_ends() {
        let s = Scale::sequential(0.0, 2.0, "w");
        assert_eq!(s.rgb(0.0), [68, 1, 84]);
        assert_eq!(s.rgb(2.0), [253, 231, 37]);
        let d = Scale::diverging(0.5, "v");
        assert_eq!(d.rgb(0.0), [247, 247, 247]);
        assert_eq!(d.rgb(-0.5), [33, 102, 172]);
        assert_eq!(d.rgb(9.0), [230, 97, 1]);
    }
}
