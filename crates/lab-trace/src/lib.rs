//! The trace labkit writes while a step program runs and the checker reads back to judge
//! it: one typed definition shared by both sides, so that a field renamed on one side
//! is a compile error on the other, and a line that does not match is an error the
//! checker reports, never a value it makes up.
//!
//! Each process appends JSON lines to `<dir>/trace-<pid>.jsonl` ([`file_name`]) when
//! [`TRACE_ENV`] names `dir`. A line is one [`Record`]: who wrote it and when (the
//! envelope: pid, parent pid, local rank, global rank, group size, wall-clock time) and
//! one [`Event`], whose name is the line's `event` field and whose fields sit beside the
//! envelope's, as in
//!
//! ```text
//! {"event":"dataset_ready","pid":4242,"ppid":4200,"local_rank":0,"rank":0,"world_size":2,"time":1764000000.25,"dir":"data","kind_used":"generated","action":"Generated","downloaded":[]}
//! ```
//!
//! ```
//! use lab_trace::{event, Event, Record};
//!
//! let mut record = Record::now(event::Weights { epoch: 1, digest: "9e3779b97f4a7c15".into(), projection: [0.5; 8] });
//! record.rank = Some(0); // labkit fills in the envelope
//! record.time = 1764000000.25;
//! let line = record.to_line();
//! let back = Record::parse(&line)?;
//! assert_eq!(back, record);
//! // Typed access: the event's own struct, or `None` for another kind.
//! let weights: &event::Weights = back.get().unwrap();
//! assert_eq!(weights.epoch, 1);
//! assert!(back.get::<event::EpochReport>().is_none());
//! // A line without one of its event's fields is an error naming the event and the field.
//! let err = Record::parse(&line.replace("\"epoch\":1,", "")).unwrap_err();
//! assert_eq!(err.to_string(), "event `weights`: missing field `epoch`");
//! # Ok::<(), lab_trace::TraceError>(())
//! ```
pub mod event;
mod floats;
mod names;
mod read;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use event::{Event, EventKind};
pub use names::{CollectiveOp, DatasetAction, DatasetKind, Dtype, ReduceOp};
pub use read::{events, Malformed, Trace};

/// Environment variable: the directory trace files go to. Unset or empty: no trace.
pub const TRACE_ENV: &str = "DDP_LAB_TRACE";

/// The trace file of process `pid` in the trace directory.
pub fn file_name(pid: u32) -> String {
    format!("trace-{pid}.jsonl")
}

/// One line of the trace: who wrote it, when, and what happened.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The writing process.
    pub pid: u32,
    /// Its parent: the launcher, or the invocation that spawned it (`dist::spawn`).
    pub ppid: i64,
    /// The process's local rank, from `spawn` or `LOCAL_RANK`; `None` when neither says.
    pub local_rank: Option<usize>,
    /// The global rank, once the default process group exists.
    pub rank: Option<usize>,
    /// The default group's size once it exists. In a [`event::World`] line this is the
    /// world size the program announced (the event's own field of the same name).
    pub world_size: Option<usize>,
    /// Wall-clock seconds since the Unix epoch (sub-microsecond resolution): comparable
    /// between the processes of one machine, which is how the checker orders ranks.
    pub time: f64,
    /// What happened.
    pub event: Event,
}

/// The envelope as it is written: the fields every line has besides its event's.
#[derive(Serialize, Deserialize)]
struct Envelope {
    pid: u32,
    ppid: i64,
    local_rank: Option<usize>,
    rank: Option<usize>,
    world_size: Option<usize>,
    time: f64,
}

/// Why a line is not a trace record: its event (when it names one) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    /// The line's `event` field, when it has a string one.
    pub event: Option<String>,
    /// What is wrong, e.g. "missing field `epoch_time`".
    pub reason: String,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.event {
            Some(event) => write!(f, "event `{event}`: {}", self.reason),
            None => f.write_str(&self.reason),
        }
    }
}

impl std::error::Error for TraceError {}

impl Record {
    /// A record of `event` with an empty envelope stamped now; the writer fills in who
    /// it is (labkit knows the ranks, this crate does not).
    pub fn now(event: impl Into<Event>) -> Record {
        let time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        Record {
            pid: std::process::id(),
            ppid: 0,
            local_rank: None,
            rank: None,
            world_size: None,
            time,
            event: event.into(),
        }
    }

    /// The event as its own type, `None` when it is another kind.
    pub fn get<E: EventKind>(&self) -> Option<&E> {
        E::of(&self.event)
    }

    /// The line as written: one JSON object, no newline.
    pub fn to_line(&self) -> String {
        self.to_value().to_string()
    }

    /// The JSON object: the envelope's fields, then the event's (`event` and its own),
    /// which win where a name is in both (only `world_size`, in [`event::World`]).
    pub fn to_value(&self) -> Value {
        let envelope = Envelope {
            pid: self.pid,
            ppid: self.ppid,
            local_rank: self.local_rank,
            rank: self.rank,
            world_size: self.world_size,
            time: self.time,
        };
        let mut map = match serde_json::to_value(envelope) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        };
        if let Ok(Value::Object(fields)) = serde_json::to_value(&self.event) {
            map.extend(fields);
        }
        Value::Object(map)
    }

    /// Reads one line back.
    pub fn parse(line: &str) -> Result<Record, TraceError> {
        let value: Value =
            serde_json::from_str(line).map_err(|e| TraceError { event: None, reason: e.to_string() })?;
        Record::from_value(value)
    }

    /// Reads one line's JSON object back: every field its event has, of the right type.
    pub fn from_value(value: Value) -> Result<Record, TraceError> {
        let event_name = value.get("event").and_then(Value::as_str).map(String::from);
        let error = |reason: String| TraceError { event: event_name.clone(), reason };
        if !value.is_object() {
            return Err(error(format!("not a JSON object: {value}")));
        }
        if event_name.is_none() {
            return Err(error("no `event` field naming what happened".into()));
        }
        let envelope = Envelope::deserialize(&value).map_err(|e| error(e.to_string()))?;
        let event = Event::deserialize(&value).map_err(|e| error(e.to_string()))?;
        Ok(Record {
            pid: envelope.pid,
            ppid: envelope.ppid,
            local_rank: envelope.local_rank,
            rank: envelope.rank,
            world_size: envelope.world_size,
            time: envelope.time,
            event,
        })
    }
}

impl Serialize for Record {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Record {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Record::from_value(Value::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamped(event: impl Into<Event>) -> Record {
        Record {
            pid: 7,
            ppid: 1,
            local_rank: Some(1),
            rank: Some(3),
            world_size: Some(4),
            time: 12.5,
            event: event.into(),
        }
    }

    #[test]
    fn every_field_survives_the_line() {
        let records = [
            stamped(event::EpochReport {
                epoch: 2,
                cumulative_time: 3.0,
                epoch_time: 1.5,
                images_per_sec: 640.0,
                validation_loss: 0.5,
                validation_accuracy: 0.8,
            }),
            stamped(event::Collective {
                op: CollectiveOp::Reduce,
                reduce_op: Some(ReduceOp::Sum),
                root: Some(0),
                dtype: Some(Dtype::Double),
                numel: 1,
                seq: 4,
                group: 0,
                values: Some(vec![652.5]),
                site: Some("src/main.rs:142:13".into()),
            }),
            stamped(event::LoadDataset { dir: "data".into() }),
            stamped(event::TrainingStep {
                step: 4,
                loss: None,
                parameters: vec![event::StepParameter {
                    shape: vec![2, 3],
                    norm: 1.25,
                    samples: vec![0.5, -0.75],
                }],
            }),
            stamped(event::StopDecision { recorded: 2, accuracy: 0.8125, stop: true }),
            stamped(event::ParameterValues {
                epoch: 0,
                sharded: true,
                parameters: vec![event::ParameterSummary {
                    name: "fc.bias".into(),
                    numel: 10,
                    sum: -0.25,
                    sample: vec![0.5, -0.125],
                }],
            }),
            stamped(event::ShardsHeld {
                epoch: 1,
                model_numel: 100,
                shard_numel: 52,
                grad_numel: 52,
                optimizer_numel: 52,
                optimizer_state_numel: 52,
                peak_unsharded_numel: 60,
                element_bytes: 4,
                units: vec![event::ShardUnit { prefix: String::new(), numel: 100, shard_numel: 52 }],
            }),
            stamped(event::GroupCreated {
                group: 2,
                ranks: vec![1, 3],
                group_rank: Some(1),
                mesh_dim: Some("dp".into()),
            }),
            stamped(event::GroupCreated { group: 3, ranks: vec![0, 1], group_rank: None, mesh_dim: None }),
            stamped(event::TensorSlices {
                epoch: 0,
                tp_rank: 1,
                tp_size: 2,
                group: 3,
                parameters: vec![event::ParameterSlice {
                    name: "block1.cbr2.conv.weight".into(),
                    shape: vec![16, 8, 3, 3],
                    whole: vec![16, 16, 3, 3],
                    dim: Some(1),
                    offset: 8,
                    length: 8,
                    digest: "00ff00ff00ff00ff".into(),
                }],
            }),
        ];
        for record in records {
            assert_eq!(Record::parse(&record.to_line()).unwrap(), record);
        }
    }

    /// The line's shape is what recorded fixtures hold: the event's name in `event`,
    /// its fields beside the envelope's, and `world` announcing its own world size.
    #[test]
    fn the_world_event_announces_its_own_world_size() {
        let mut world = stamped(event::World { world_size: 6, rendezvous: "localhost:9956".into() });
        world.world_size = None;
        let value = world.to_value();
        assert_eq!(value["event"], "world");
        assert_eq!(value["world_size"], 6);
        assert_eq!(value["rendezvous"], "localhost:9956");
        let back = Record::from_value(value).unwrap();
        assert_eq!(back.world_size, Some(6));
        assert_eq!(back.get::<event::World>().unwrap().world_size, 6);
    }

    #[test]
    fn a_bad_line_says_what_is_wrong() {
        let line = stamped(event::Printed { epoch: 0, line: "Epoch =  0: ...".into(), images_per_sec: 1.0 })
            .to_line();
        let wrong_type = line.replace("\"epoch\":0", "\"epoch\":\"zero\"");
        let err = Record::parse(&wrong_type).unwrap_err();
        assert_eq!(err.event.as_deref(), Some("printed"));
        assert!(err.reason.contains("invalid type: string \"zero\""), "{err}");
        let unknown = line.replace("\"printed\"", "\"shouted\"");
        assert!(Record::parse(&unknown)
            .unwrap_err()
            .to_string()
            .starts_with("event `shouted`: unknown variant"));
        let no_time = line.replace("\"time\":12.5,", "");
        assert_eq!(Record::parse(&no_time).unwrap_err().to_string(), "event `printed`: missing field `time`");
        assert_eq!(
            Record::parse("{\"pid\":1}").unwrap_err().to_string(),
            "no `event` field naming what happened"
        );
        assert!(Record::parse("{\"event\":\"printed\",\"pi").is_err(), "a cut line");
    }

    /// Lines as labkit wrote them before the values were typed read back as the enums,
    /// and are written again with the same fields and values.
    #[test]
    fn recorded_values_read_typed_and_write_back_the_same() {
        let lines = [
            r#"{"pid":4242,"ppid":4200,"local_rank":0,"rank":0,"world_size":2,"time":1764000000.25,"event":"prepare_dataset","dir":"data","kind":"auto"}"#,
            r#"{"pid":4242,"ppid":4200,"local_rank":0,"rank":0,"world_size":2,"time":1764000000.5,"event":"dataset_ready","dir":"data","kind_used":"real","action":"SystemCopy","downloaded":[]}"#,
            r#"{"pid":4242,"ppid":4200,"local_rank":1,"rank":1,"world_size":2,"time":1764000001.5,"event":"collective","op":"reduce_scatter_tensor","reduce_op":"AVG","root":null,"dtype":"BFloat16","numel":8,"seq":3,"group":1,"values":null}"#,
            r#"{"pid":4242,"ppid":4200,"local_rank":1,"rank":1,"world_size":2,"time":1764000002.5,"event":"collective","op":"barrier","reduce_op":null,"root":null,"dtype":null,"numel":0,"seq":4,"group":0,"values":null,"site":"src/main.rs:93:5"}"#,
        ];
        for line in lines {
            let written = Record::parse(line).unwrap().to_value();
            assert_eq!(written, serde_json::from_str::<Value>(line).unwrap(), "{line}");
        }
        let ready = Record::parse(lines[1]).unwrap();
        let ready: &event::DatasetReady = ready.get().unwrap();
        assert_eq!((ready.kind_used, ready.action), (DatasetKind::Real, DatasetAction::SystemCopy));
        let call = Record::parse(lines[2]).unwrap();
        let call: &event::Collective = call.get().unwrap();
        assert_eq!(
            (call.op, call.reduce_op, call.dtype),
            (CollectiveOp::ReduceScatterTensor, Some(ReduceOp::Avg), Some(Dtype::BFloat16))
        );
    }

    /// A trace written before groups were recorded still reads (they are new events,
    /// not new fields of old ones), and a group made outside a mesh is written without
    /// a `mesh_dim`, as a reader that predates meshes expects.
    #[test]
    fn groups_are_additive_to_the_trace() {
        let old = r#"{"pid":4242,"ppid":4200,"local_rank":1,"rank":1,"world_size":2,"time":1764000001.5,"event":"collective","op":"all_reduce","reduce_op":"SUM","root":null,"dtype":"Float","numel":8,"seq":3,"group":1,"values":null}"#;
        assert!(Record::parse(old).unwrap().get::<event::Collective>().is_some());
        let line = r#"{"pid":4242,"ppid":4200,"local_rank":3,"rank":3,"world_size":4,"time":1764000000.5,"event":"group_created","group":1,"ranks":[0,1],"group_rank":null}"#;
        let record = Record::parse(line).unwrap();
        let group: &event::GroupCreated = record.get().unwrap();
        assert_eq!(
            (group.group, &group.ranks[..], group.group_rank, group.mesh_dim.as_deref()),
            (1, &[0, 1][..], None, None)
        );
        assert_eq!(record.to_value(), serde_json::from_str::<Value>(line).unwrap());
        let in_mesh = line.replace("\"group_rank\":null", "\"group_rank\":null,\"mesh_dim\":\"tp\"");
        let record = Record::parse(&in_mesh).unwrap();
        assert_eq!(record.get::<event::GroupCreated>().unwrap().mesh_dim.as_deref(), Some("tp"));
    }

    /// A value this revision does not know (a collective a newer tch-distributed issues)
    /// makes the line malformed, as an unknown event does: the checker says the trace is
    /// not its own rather than judge a call it cannot name.
    #[test]
    fn an_unknown_value_is_a_bad_line() {
        let line = stamped(event::Collective {
            op: CollectiveOp::AllReduce,
            reduce_op: Some(ReduceOp::Max),
            root: None,
            dtype: Some(Dtype::Float),
            numel: 2,
            seq: 0,
            group: 0,
            values: None,
            site: None,
        })
        .to_line();
        let err = Record::parse(&line.replace("\"all_reduce\"", "\"all_to_all\"")).unwrap_err();
        assert_eq!(err.event.as_deref(), Some("collective"));
        assert!(
            err.reason.starts_with("unknown variant `all_to_all`, expected one of `all_reduce`"),
            "{err}"
        );
        let err = Record::parse(&line.replace("\"MAX\"", "\"max\"")).unwrap_err();
        assert!(err.reason.starts_with("unknown variant `max`, expected one of `SUM`"), "{err}");
        let ready = stamped(event::DatasetReady {
            dir: "data".into(),
            kind_used: DatasetKind::Generated,
            action: DatasetAction::Generated,
            downloaded: vec![],
        })
        .to_line();
        assert!(Record::parse(&ready.replace("\"Generated\"", "\"Borrowed\"")).is_err());
    }

    /// A diverged run's NaN loss is written as JSON's null and read back as NaN: a
    /// value the checker judges, not a malformed line.
    #[test]
    fn not_a_number_is_a_value() {
        let record = stamped(event::Validation {
            accuracy: 0.1,
            loss: f64::NAN,
            correct: 1,
            total: 10,
            batches: 1,
            indices: vec![0, 1],
        });
        let line = record.to_line();
        assert!(line.contains("\"loss\":null"), "{line}");
        let back = Record::parse(&line).unwrap();
        assert!(back.get::<event::Validation>().unwrap().loss.is_nan());
        // A diverged parameter's summary too.
        let record = stamped(event::ParameterValues {
            epoch: 0,
            sharded: false,
            parameters: vec![event::ParameterSummary {
                name: "fc.weight".into(),
                numel: 2,
                sum: f64::NAN,
                sample: vec![f64::NAN, 1.0],
            }],
        });
        let back = Record::parse(&record.to_line()).unwrap();
        let summary = &back.get::<event::ParameterValues>().unwrap().parameters[0];
        assert!(summary.sum.is_nan() && summary.sample[0].is_nan() && summary.sample[1] == 1.0);
    }
}
