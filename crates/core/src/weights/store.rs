//! All the files of one model (a bare `.safetensors`, or a folder with `config.json`,
//! `tokenizer.json` and possibly a sharded index), and lookup of a tensor by name.

use std::collections::HashMap;
use std::ops::Range;

use super::{ByteSource, SafetensorsFile, Tensor, TensorEntry};
use crate::{Error, Result};

/// The raw inputs of a model, however they were obtained (disk, browser `File`s, fetch).
#[derive(Default)]
pub struct ModelFiles {
    pub config_json: Option<String>,
    pub tokenizer_json: Option<Vec<u8>>,
    pub index_json: Option<String>,
    pub weights: Vec<Box<dyn ByteSource>>,
}

impl ModelFiles {
    /// Sorts named files into their roles by file name, as a folder would hold them.
    pub fn from_named(files: Vec<(String, Box<dyn ByteSource>)>) -> Result<Self> {
        let mut model = ModelFiles::default();
        for (name, source) in files {
            let base = name.rsplit(['/', '\\']).next().unwrap_or(&name).to_string();
            let read_text = |source: &dyn ByteSource| -> Result<String> {
                let bytes = source.read_range(0, source.len() as usize)?;
                String::from_utf8(bytes).map_err(|_| Error::NotText { file: base.to_string() })
            };
            if base == "config.json" {
                model.config_json = Some(read_text(source.as_ref())?);
            } else if base == "tokenizer.json" {
                model.tokenizer_json = Some(source.read_range(0, source.len() as usize)?);
            } else if base.ends_with(".safetensors.index.json") {
                model.index_json = Some(read_text(source.as_ref())?);
            } else if base.ends_with(".safetensors") {
                model.weights.push(source);
            }
            // Anything else in a folder (README, tokenizer_config.json, ...) is not needed.
        }
        if model.weights.is_empty() {
            return Err(Error::NoWeights);
        }
        Ok(model)
    }

    /// Reads a model from a path: a `.safetensors` file or a folder.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn from_path(path: &std::path::Path) -> Result<Self> {
        use super::FileSource;
        let open = |p: &std::path::Path| -> Result<(String, Box<dyn ByteSource>)> {
            Ok((p.display().to_string(), Box::new(FileSource::open(p)?) as Box<dyn ByteSource>))
        };
        if path.is_dir() {
            let mut entries: Vec<_> = std::fs::read_dir(path)
                .map_err(|e| Error::File { path: path.display().to_string(), reason: e.to_string() })?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect();
            entries.sort();
            Self::from_named(entries.iter().map(|p| open(p)).collect::<Result<_>>()?)
        } else {
            let mut files = vec![open(path)?];
            // A bare file may still have a config.json / tokenizer.json beside it.
            if let Some(dir) = path.parent() {
                for extra in ["config.json", "tokenizer.json"] {
                    let candidate = dir.join(extra);
                    if candidate.is_file() {
                        files.push(open(&candidate)?);
                    }
                }
            }
            Self::from_named(files)
        }
    }
}

/// Tensors by name across one or more safetensors files.
pub struct TensorStore<'a> {
    files: Vec<SafetensorsFile<'a>>,
    location: HashMap<String, usize>,
}

impl<'a> TensorStore<'a> {
    pub fn open(files: &'a ModelFiles) -> Result<Self> {
        let index_json = files.index_json.as_deref();
        let weights = &files.weights;
        let shard_names = match index_json {
            Some(text) => Some(shards_named_by_index(text)?),
            None => None,
        };
        let mut opened = Vec::new();
        for source in weights {
            opened.push(SafetensorsFile::open(source.as_ref())?);
        }
        if let Some(names) = &shard_names {
            for shard in names {
                let present = opened.iter().any(|f| f.name().rsplit(['/', '\\']).next() == Some(shard.as_str()));
                if !present {
                    return Err(Error::ShardMissing { shard: shard.clone() });
                }
            }
        }
        let mut location = HashMap::new();
        for (file_index, file) in opened.iter().enumerate() {
            for name in file.entries().keys() {
                if let Some(&first) = location.get(name) {
                    let first: &SafetensorsFile = &opened[first];
                    return Err(Error::TensorInTwoFiles {
                        tensor: name.clone(),
                        first: first.name().to_string(),
                        second: file.name().to_string(),
                    });
                }
                location.insert(name.clone(), file_index);
            }
        }
        Ok(Self { files: opened, location })
    }

    /// Tells each file's source which bytes are about to be read: the tensors `wanted` names.
    pub fn announce(&self, wanted: impl Fn(&str) -> bool) {
        for file in &self.files {
            let ranges: Vec<_> =
                file.entries().iter().filter(|(name, _)| wanted(name)).map(|(_, e)| e.start..e.end).collect();
            if !ranges.is_empty() {
                file.source().will_read(ranges);
            }
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.location.contains_key(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.location.keys().map(String::as_str)
    }

    pub fn entry(&self, name: &str) -> Option<&TensorEntry> {
        self.location.get(name).and_then(|&i| self.files[i].entries().get(name))
    }

    /// File-level metadata (`__metadata__`) of the first file that has the key.
    pub fn metadata(&self, key: &str) -> Option<&str> {
        self.files.iter().find_map(|f| f.metadata().get(key).map(String::as_str))
    }

    pub fn read(&self, name: &str, family: &str) -> Result<Tensor> {
        let missing = || Error::MissingTensor { family: family.into(), tensor: name.into() };
        let &file_index = self.location.get(name).ok_or_else(missing)?;
        self.files[file_index].read(name)?.ok_or_else(missing)
    }

    /// Rows `rows` of a 2-D tensor, read by byte range (see `SafetensorsFile::read_rows`).
    pub fn read_rows(&self, name: &str, family: &str, rows: Range<usize>) -> Result<Tensor> {
        let missing = || Error::MissingTensor { family: family.into(), tensor: name.into() };
        let &file_index = self.location.get(name).ok_or_else(missing)?;
        self.files[file_index].read_rows(name, rows)?.ok_or_else(missing)
    }
}

pub(crate) fn shards_named_by_index(text: &str) -> Result<Vec<String>> {
    let index: serde_json::Value = serde_json::from_str(text).map_err(|e| Error::BadIndex { reason: e.to_string() })?;
    let map = index.get("weight_map").and_then(|m| m.as_object()).ok_or(Error::IndexWithoutWeightMap)?;
    let mut shards: Vec<String> = map.values().filter_map(|v| v.as_str().map(str::to_string)).collect();
    shards.sort();
    shards.dedup();
    Ok(shards)
}
