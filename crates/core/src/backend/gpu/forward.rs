//! The forward pass on the GPU (forward.wgsl): in progress.

use super::Gpu;
use crate::forward::{ForwardOutput, HeadOutputs};
use crate::model::Weights;
use crate::{Error, Result};

impl Gpu {
    pub async fn forward(
        &self,
        _model: &(impl Weights + ?Sized),
        _runs: &[(&[usize], HeadOutputs<'_>)],
        _each_layer: &mut dyn FnMut(usize, usize),
    ) -> Result<Vec<ForwardOutput>> {
        Err(Error::Gpu("the forward pass on the GPU is not built yet".into()))
    }
}
