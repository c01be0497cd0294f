//! JSON has no NaN or infinity: serde_json writes a non-finite float as `null`. A
//! diverged run's loss is such a value, and the checker must judge it rather than call
//! the line malformed, so the float fields read `null` back as NaN.
use serde::{Deserialize, Deserializer};

fn nan_if_null(x: Option<f64>) -> f64 {
    x.unwrap_or(f64::NAN)
}

pub fn float<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(nan_if_null(Option::deserialize(d)?))
}

pub fn floats<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    Ok(Vec::<Option<f64>>::deserialize(d)?.into_iter().map(nan_if_null).collect())
}

pub fn optional_floats<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<f64>>, D::Error> {
    Ok(Option::<Vec<Option<f64>>>::deserialize(d)?.map(|v| v.into_iter().map(nan_if_null).collect()))
}

pub fn projection<'de, D: Deserializer<'de>>(d: D) -> Result<[f64; 8], D::Error> {
    Ok(<[Option<f64>; 8]>::deserialize(d)?.map(nan_if_null))
}
