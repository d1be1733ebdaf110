//! A sweep unit's rows as a Parquet file: written under a temporary name and renamed, so that a
//! shard killed halfway, or two shards on one network file system, never leave a half-written
//! file under a unit's name; and read back (its footer alone to resume, its rows to reuse them
//! for a unit with the same weights).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use headprint::sweep::{Column, Kind, Table, Values};
use headprint::{Error, Result};
use parquet::basic::{LogicalType, Repetition, Type as Physical};
use parquet::column::writer::ColumnWriterImpl;
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DataType, DoubleType, Int64Type};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::record::Field;
use parquet::schema::types::Type;

fn failed(path: &Path, error: impl std::fmt::Display) -> Error {
    Error::File { path: path.display().to_string(), reason: error.to_string() }
}

/// Writes `table` to `path` with `metadata` in the file's key-value metadata, atomically: the
/// bytes go to a hidden temporary file in the same folder (so the rename stays on one file
/// system), which is synced and then renamed over `path`.
pub fn write(path: &Path, table: &Table, metadata: &[(&str, String)]) -> Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("rows");
    let temporary = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let written = write_to(&temporary, table, metadata).and_then(|()| {
        std::fs::rename(&temporary, path).map_err(|e| failed(path, format!("could not rename into place: {e}")))
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

fn write_to(path: &Path, table: &Table, metadata: &[(&str, String)]) -> Result<()> {
    let fields = table
        .columns
        .iter()
        .map(|column| {
            let (physical, logical) = match column.values.kind() {
                Kind::Count => (Physical::INT64, None),
                Kind::Number => (Physical::DOUBLE, None),
                Kind::Flag => (Physical::BOOLEAN, None),
                Kind::Text => (Physical::BYTE_ARRAY, Some(LogicalType::String)),
            };
            Type::primitive_type_builder(&column.name, physical)
                .with_repetition(Repetition::OPTIONAL)
                .with_logical_type(logical)
                .build()
                .map(Arc::new)
                .map_err(|e| failed(path, e))
        })
        .collect::<Result<Vec<_>>>()?;
    let schema =
        Type::group_type_builder("headprint_sweep").with_fields(fields).build().map_err(|e| failed(path, e))?;
    let pairs = metadata.iter().map(|(key, value)| KeyValue::new(key.to_string(), value.clone())).collect();
    let properties = WriterProperties::builder().set_key_value_metadata(Some(pairs)).build();
    let file = File::create(path).map_err(|e| failed(path, e))?;
    let mut writer =
        SerializedFileWriter::new(file, Arc::new(schema), Arc::new(properties)).map_err(|e| failed(path, e))?;
    let mut group = writer.next_row_group().map_err(|e| failed(path, e))?;
    for column in &table.columns {
        let mut writer = group.next_column().map_err(|e| failed(path, e))?.ok_or_else(|| failed(path, "no column"))?;
        match &column.values {
            Values::Count(values) => put(writer.typed::<Int64Type>(), values, |v| *v),
            Values::Number(values) => put(writer.typed::<DoubleType>(), values, |v| *v),
            Values::Flag(values) => put(writer.typed::<BoolType>(), values, |v| *v),
            Values::Text(values) => put(writer.typed::<ByteArrayType>(), values, |v| ByteArray::from(v.as_str())),
        }
        .map_err(|e| failed(path, format!("column {}: {e}", column.name)))?;
        writer.close().map_err(|e| failed(path, e))?;
    }
    group.close().map_err(|e| failed(path, e))?;
    let file = writer.into_inner().map_err(|e| failed(path, e))?;
    file.sync_all().map_err(|e| failed(path, e))
}

/// One optional column: the values present, and a definition level per row (1 present, 0 null).
fn put<T: DataType, V>(
    writer: &mut ColumnWriterImpl<'_, T>,
    values: &[Option<V>],
    convert: impl Fn(&V) -> T::T,
) -> parquet::errors::Result<usize> {
    let present: Vec<T::T> = values.iter().flatten().map(convert).collect();
    let levels: Vec<i16> = values.iter().map(|v| i16::from(v.is_some())).collect();
    writer.write_batch(&present, Some(&levels), None)
}

/// A file's key-value metadata, from its footer alone.
pub fn metadata(path: &Path) -> Result<Vec<(String, String)>> {
    let reader = SerializedFileReader::try_from(path).map_err(|e| failed(path, e))?;
    let pairs = reader.metadata().file_metadata().key_value_metadata().cloned().unwrap_or_default();
    Ok(pairs.into_iter().filter_map(|pair| Some((pair.key, pair.value?))).collect())
}

/// Every row of a file written by `write`, as the table it was.
pub fn read(path: &Path) -> Result<Table> {
    let reader = SerializedFileReader::try_from(path).map_err(|e| failed(path, e))?;
    let schema = reader.metadata().file_metadata().schema_descr_ptr();
    let mut columns: Vec<Column> = schema
        .columns()
        .iter()
        .map(|column| {
            let values = match column.physical_type() {
                Physical::INT64 => Values::Count(Vec::new()),
                Physical::DOUBLE => Values::Number(Vec::new()),
                Physical::BOOLEAN => Values::Flag(Vec::new()),
                _ => Values::Text(Vec::new()),
            };
            Column { name: column.name().to_string(), values }
        })
        .collect();
    let mut rows = 0;
    for row in reader.get_row_iter(None).map_err(|e| failed(path, e))? {
        let row = row.map_err(|e| failed(path, e))?;
        for (column, (_, field)) in columns.iter_mut().zip(row.get_column_iter()) {
            let unexpected = || failed(path, format!("column {}: unexpected {field:?}", column.name));
            match (&mut column.values, field) {
                (Values::Count(v), Field::Long(x)) => v.push(Some(*x)),
                (Values::Number(v), Field::Double(x)) => v.push(Some(*x)),
                (Values::Flag(v), Field::Bool(x)) => v.push(Some(*x)),
                (Values::Text(v), Field::Str(x)) => v.push(Some(x.clone())),
                (Values::Count(v), Field::Null) => v.push(None),
                (Values::Number(v), Field::Null) => v.push(None),
                (Values::Flag(v), Field::Null) => v.push(None),
                (Values::Text(v), Field::Null) => v.push(None),
                _ => return Err(unexpected()),
            }
        }
        rows += 1;
    }
    Ok(Table { rows, columns })
}
