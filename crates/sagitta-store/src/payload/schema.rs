//! The payload schema: column types ([`FieldType`], with their names and
//! Arrow forms), named fields, and a collection's [`Schema`], which only
//! grows (a new column is added, a column given another type is refused).

use super::error::PayloadError;
use arrow_schema::{DataType, TimeUnit};
use std::sync::Arc;

/// Type of a payload column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FieldType {
    /// 64-bit signed integer.
    Int64 = 1,
    /// 64-bit float (NaN refused).
    Float64 = 2,
    /// Boolean.
    Bool = 3,
    /// UTF-8 string.
    String = 4,
    /// Microseconds since the Unix epoch, UTC.
    Timestamp = 5,
    /// A list of strings (tags).
    Tags = 6,
}

impl FieldType {
    /// The name used in schemas, manifests and errors.
    pub fn name(self) -> &'static str {
        match self {
            FieldType::Int64 => "int64",
            FieldType::Float64 => "float64",
            FieldType::Bool => "bool",
            FieldType::String => "string",
            FieldType::Timestamp => "timestamp",
            FieldType::Tags => "tags",
        }
    }

    /// Parses a name written by [`FieldType::name`].
    pub fn parse(s: &str) -> Option<FieldType> {
        Some(match s {
            "int64" => FieldType::Int64,
            "float64" => FieldType::Float64,
            "bool" => FieldType::Bool,
            "string" => FieldType::String,
            "timestamp" => FieldType::Timestamp,
            "tags" => FieldType::Tags,
            _ => return None,
        })
    }

    /// The Arrow type a column of this type is stored as.
    pub fn arrow(self) -> DataType {
        match self {
            FieldType::Int64 => DataType::Int64,
            FieldType::Float64 => DataType::Float64,
            FieldType::Bool => DataType::Boolean,
            FieldType::String => DataType::Utf8,
            FieldType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            FieldType::Tags => DataType::List(Arc::new(arrow_schema::Field::new(
                "item",
                DataType::Utf8,
                true,
            ))),
        }
    }

    /// The payload type of an Arrow type we store or accept on input.
    pub fn from_arrow(t: &DataType) -> Option<FieldType> {
        Some(match t {
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64 => FieldType::Int64,
            DataType::Float16 | DataType::Float32 | DataType::Float64 => FieldType::Float64,
            DataType::Boolean => FieldType::Bool,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => FieldType::String,
            DataType::Dictionary(_, v) if FieldType::from_arrow(v) == Some(FieldType::String) => {
                FieldType::String
            }
            DataType::Timestamp(_, _) => FieldType::Timestamp,
            DataType::List(f) | DataType::LargeList(f)
                if FieldType::from_arrow(f.data_type()) == Some(FieldType::String) =>
            {
                FieldType::Tags
            }
            _ => return None,
        })
    }
}

/// A named, typed column of the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Column name (1..=255 bytes of UTF-8).
    pub name: String,
    /// Its type.
    pub ty: FieldType,
}

/// The payload columns of a collection, in the order they appeared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schema {
    fields: Vec<Field>,
}

impl Schema {
    /// A schema of the given fields (names must be unique).
    pub fn new(fields: Vec<Field>) -> Result<Schema, PayloadError> {
        let mut s = Schema::default();
        s.merge(&fields)?;
        Ok(s)
    }

    /// The fields, in order.
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether there is no field.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// Position of the field `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }

    /// The field `name`, or [`PayloadError::UnknownField`].
    pub fn field(&self, name: &str) -> Result<(usize, FieldType), PayloadError> {
        self.index_of(name)
            .map(|i| (i, self.fields[i].ty))
            .ok_or_else(|| PayloadError::UnknownField {
                field: name.to_string(),
                known: self.names(),
            })
    }

    fn names(&self) -> String {
        if self.fields.is_empty() {
            return "none".into();
        }
        self.fields
            .iter()
            .map(|f| f.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Checks `fields` against the schema and adds the new ones; returns
    /// whether anything was added. Nothing changes on error.
    pub fn merge(&mut self, fields: &[Field]) -> Result<bool, PayloadError> {
        let mut add: Vec<&Field> = Vec::new();
        for f in fields {
            if f.name.is_empty() || f.name.len() > 255 {
                return Err(PayloadError::Value {
                    field: f.name.clone(),
                    reason: "a field name must be 1 to 255 bytes".into(),
                });
            }
            match self
                .index_of(&f.name)
                .map(|i| &self.fields[i])
                .or_else(|| add.iter().find(|g| g.name == f.name).copied())
            {
                Some(e) if e.ty != f.ty => {
                    return Err(PayloadError::TypeConflict {
                        field: f.name.clone(),
                        existing: e.ty.name(),
                        given: f.ty.name().into(),
                    })
                }
                Some(_) => {}
                None => add.push(f),
            }
        }
        let grew = !add.is_empty();
        self.fields.extend(add.into_iter().cloned());
        Ok(grew)
    }

    /// The Arrow schema of a segment's payload section.
    pub fn arrow(&self) -> arrow_schema::Schema {
        arrow_schema::Schema::new(
            self.fields
                .iter()
                .map(|f| arrow_schema::Field::new(&f.name, f.ty.arrow(), true))
                .collect::<Vec<_>>(),
        )
    }

    /// The schema of an Arrow schema written by [`Schema::arrow`].
    pub fn from_arrow(s: &arrow_schema::Schema) -> Result<Schema, PayloadError> {
        let fields = s
            .fields()
            .iter()
            .map(|f| {
                FieldType::from_arrow(f.data_type())
                    .map(|ty| Field {
                        name: f.name().clone(),
                        ty,
                    })
                    .ok_or_else(|| PayloadError::TypeConflict {
                        field: f.name().clone(),
                        existing: "one of int64, float64, bool, string, timestamp, tags",
                        given: f.data_type().to_string(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Schema::new(fields)
    }
}
