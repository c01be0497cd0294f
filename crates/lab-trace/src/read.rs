//! Reading a run's trace back: every process's file of one directory, as records in
//! time order, and every line that is not a record kept with what is wrong with it.
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{EventKind, Record, TraceError};

/// The trace of one run: all its processes' records, ordered by time.
///
/// Stored (the checker records observations as fixtures) as the JSON array of its lines,
/// the malformed ones as they were.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    /// The well-formed lines, in time order.
    pub records: Vec<Record>,
    /// The lines that are not records.
    pub malformed: Vec<Malformed>,
}

/// A line that is not a trace record.
#[derive(Debug, Clone, PartialEq)]
pub struct Malformed {
    /// The line as written (a JSON value, or the text of a line that is not JSON).
    pub line: Value,
    /// Where it was: `trace-<pid>.jsonl line N`, when read from a file.
    pub place: Option<String>,
    /// What is wrong with it.
    pub error: TraceError,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.place {
            Some(place) => write!(f, "{place}: {}", self.error),
            None => write!(f, "{}", self.error),
        }
    }
}

impl Trace {
    /// Every `*.jsonl` file of `dir` (a missing directory is an empty trace).
    pub fn read(dir: &Path) -> Trace {
        let mut trace = Trace::default();
        let Ok(entries) = std::fs::read_dir(dir) else { return trace };
        let mut files: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        files.sort();
        for file in files.iter().filter(|f| f.extension().is_some_and(|e| e == "jsonl")) {
            let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let text = match std::fs::read(file) {
                Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                Err(e) => {
                    trace.malformed.push(Malformed {
                        line: Value::Null,
                        place: Some(name),
                        error: TraceError { event: None, reason: format!("cannot read the file: {e}") },
                    });
                    continue;
                }
            };
            for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                let place = Some(format!("{name} line {}", i + 1));
                trace.push_line(line, place);
            }
        }
        trace.sort();
        trace
    }

    fn push_line(&mut self, line: &str, place: Option<String>) {
        match serde_json::from_str::<Value>(line) {
            Ok(value) => self.push_value(value, place),
            Err(e) => self.malformed.push(Malformed {
                line: Value::String(line.to_string()),
                place,
                error: TraceError { event: None, reason: format!("not JSON: {e}") },
            }),
        }
    }

    fn push_value(&mut self, value: Value, place: Option<String>) {
        match Record::from_value(value.clone()) {
            Ok(record) => self.records.push(record),
            Err(error) => self.malformed.push(Malformed { line: value, place, error }),
        }
    }

    /// Orders the records by time (stable: one process's records keep their order).
    fn sort(&mut self) {
        self.records.sort_by(|a, b| a.time.total_cmp(&b.time));
    }

    /// The records, or the first malformed line when there is one: a trace with a line
    /// that could not be read may lack exactly the event a judgement needs.
    pub fn checked(&self) -> Result<&[Record], &Malformed> {
        match self.malformed.first() {
            Some(bad) => Err(bad),
            None => Ok(&self.records),
        }
    }

    /// The records of one kind with their events, in time order.
    pub fn of<E: EventKind>(&self) -> impl Iterator<Item = (&Record, &E)> {
        events(&self.records)
    }
}

/// The records of one kind in `records`, with their events.
pub fn events<E: EventKind>(records: &[Record]) -> impl Iterator<Item = (&Record, &E)> {
    records.iter().filter_map(|r| r.get::<E>().map(|e| (r, e)))
}

impl Serialize for Trace {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let lines: Vec<Value> = self
            .records
            .iter()
            .map(Record::to_value)
            .chain(self.malformed.iter().map(|m| m.line.clone()))
            .collect();
        lines.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Trace {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut trace = Trace::default();
        for (i, value) in Vec::<Value>::deserialize(deserializer)?.into_iter().enumerate() {
            let place = Some(format!("line {}", i + 1));
            match value {
                Value::String(text) => trace.push_line(&text, place),
                value => trace.push_value(value, place),
            }
        }
        trace.sort();
        Ok(trace)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::event;

    #[test]
    fn a_directory_reads_back_in_time_order_with_its_bad_lines_named() {
        let dir = tempfile::tempdir().unwrap();
        let at = |time: f64, epoch: usize| {
            let mut r = Record::now(event::TrainIndices { epoch, indices: vec![epoch] });
            r.time = time;
            r.to_line()
        };
        std::fs::write(dir.path().join(crate::file_name(1)), format!("{}\n{}\n", at(3.0, 2), at(1.0, 0)))
            .unwrap();
        let mut other = std::fs::File::create(dir.path().join(crate::file_name(2))).unwrap();
        writeln!(other, "{}", at(2.0, 1)).unwrap();
        writeln!(other, "{}", at(4.0, 3).replace("\"epoch\":3,", "")).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not a trace").unwrap();

        let trace = Trace::read(dir.path());
        let epochs: Vec<usize> = trace.of::<event::TrainIndices>().map(|(_, e)| e.epoch).collect();
        assert_eq!(epochs, [0, 1, 2]);
        assert_eq!(trace.malformed.len(), 1);
        let bad = trace.checked().unwrap_err();
        assert_eq!(bad.to_string(), "trace-2.jsonl line 2: event `train_indices`: missing field `epoch`");

        // Stored and read back (as fixtures are), the bad line stays bad.
        let stored = serde_json::to_string(&trace).unwrap();
        let back: Trace = serde_json::from_str(&stored).unwrap();
        assert_eq!(back.records, trace.records);
        assert_eq!(back.malformed.len(), 1);
        assert!(Trace::read(&dir.path().join("absent")).checked().unwrap().is_empty());
    }
}
