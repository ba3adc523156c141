//! [`Payload`]: the columns a user writes for a batch of rows (names,
//! types, one value per row per column), checked and laid out as rows of
//! the collection's schema. Built from Arrow in `arrow.rs`, from JSON in
//! `json.rs`.

use super::error::{malformed, PayloadError};
use super::schema::{Field, FieldType, Schema};
use super::value::{Row, Value};

/// Payload columns for a batch of rows, as written by a user: column
/// names and types plus one value per row per column.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Payload {
    /// The columns.
    pub fields: Vec<Field>,
    /// Values, `columns[c][row]`.
    pub columns: Vec<Vec<Value>>,
    /// Row count.
    pub rows: usize,
}

impl Payload {
    /// The rows `rows` of this payload, in that order.
    pub fn select(&self, rows: &[usize]) -> Payload {
        Payload {
            fields: self.fields.clone(),
            columns: self
                .columns
                .iter()
                .map(|c| rows.iter().map(|&r| c[r].clone()).collect())
                .collect(),
            rows: rows.len(),
        }
    }

    /// Checks value types, NaN and row count.
    pub fn validate(&self, rows: usize) -> Result<(), PayloadError> {
        if self.rows != rows {
            return Err(malformed(format!(
                "{} payload rows for {rows} keys",
                self.rows
            )));
        }
        Schema::new(self.fields.clone())?;
        for (f, col) in self.fields.iter().zip(&self.columns) {
            if col.len() != rows {
                return Err(malformed(format!(
                    "column {:?} has {} values for {rows} rows",
                    f.name,
                    col.len()
                )));
            }
            for (r, v) in col.iter().enumerate() {
                let ok = matches!(
                    (f.ty, v),
                    (_, Value::Null)
                        | (FieldType::Int64, Value::Int(_))
                        | (FieldType::Bool, Value::Bool(_))
                        | (FieldType::String, Value::Str(_))
                        | (FieldType::Timestamp, Value::Timestamp(_))
                        | (FieldType::Tags, Value::Tags(_))
                ) || matches!((f.ty, v), (FieldType::Float64, Value::Float(x)) if !x.is_nan());
                if !ok {
                    return Err(PayloadError::Value {
                        field: f.name.clone(),
                        reason: format!("row {r}: {v:?} is not a valid {}", f.ty.name()),
                    });
                }
            }
        }
        Ok(())
    }

    /// Row `r` laid out by `schema` (which must contain every column).
    pub fn row(&self, schema: &Schema, r: usize) -> Row {
        let mut row = vec![Value::Null; schema.len()];
        for (f, col) in self.fields.iter().zip(&self.columns) {
            if let Some(i) = schema.index_of(&f.name) {
                row[i] = col[r].clone();
            }
        }
        while row.last().is_some_and(Value::is_null) {
            row.pop();
        }
        row.into_boxed_slice()
    }
}
