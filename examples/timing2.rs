use headprint::analysis::circuits::Grams;
use headprint::analysis::{Circuits, HeadId, Mode};
use headprint::model::{LoadParts, Model};
use headprint::weights::ModelFiles;
use std::time::{Duration, Instant};
fn main() {
    let path = std::env::args().nth(1).unwrap();
    let files = ModelFiles::from_path(std::path::Path::new(&path)).unwrap();
    let model = Model::load(&files, LoadParts::Circuits).unwrap();
    let grams = Grams::compute(&model);
    let c = Circuits::new(&model, &grams, Mode::Folded);
    let (mut tw, mut tp, mut te) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for id in HeadId::all(&model.config) {
        let t = Instant::now();
        let w = c.head_weights(id);
        tw += t.elapsed();
        let t = Instant::now();
        let f = [c.qk(&w), c.ov_residual(&w), c.ov_token(&w)];
        tp += t.elapsed();
        let t = Instant::now();
        for x in &f {
            x.fingerprint().unwrap();
        }
        te += t.elapsed();
    }
    eprintln!("weights {tw:?} products {tp:?} eigen {te:?}");
}
