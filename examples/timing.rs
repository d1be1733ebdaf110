use headprint::analysis::Mode;
use headprint::analysis::circuits::Grams;
use headprint::analysis::fingerprint::fingerprint_model_with_progress;
use headprint::model::{LoadParts, Model};
use headprint::weights::ModelFiles;
use std::time::Instant;
fn main() {
    let path = std::env::args().nth(1).unwrap();
    let t = Instant::now();
    let files = ModelFiles::from_path(std::path::Path::new(&path)).unwrap();
    let model = Model::load(&files, LoadParts::Circuits).unwrap();
    eprintln!("load {:?}", t.elapsed());
    let t = Instant::now();
    let grams = Grams::compute(&model);
    eprintln!("grams {:?}", t.elapsed());
    let t = Instant::now();
    let _ = fingerprint_model_with_progress(&model, &grams, Mode::Folded, &mut |_, _| true).unwrap();
    eprintln!("heads {:?}", t.elapsed());
}
