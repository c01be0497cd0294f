//! Reading the collectives the ranks issued (labkit's trace of `tch_distributed::debug`):
//! which call carried a value, and where the ranks' calls disagree.
use std::collections::BTreeMap;
use std::ops::Deref;

use lab_trace::event::Collective;
use lab_trace::Record;

/// One `collective` event of a rank.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The rank that issued it (collectives are only issued in a group, so the record
    /// always has one).
    pub rank: usize,
    pub call: Collective,
}

impl Deref for Call {
    type Target = Collective;
    fn deref(&self) -> &Collective {
        &self.call
    }
}

impl Call {
    fn from_record(record: &Record) -> Option<Call> {
        Some(Call { rank: record.rank?, call: record.get::<Collective>()?.clone() })
    }

    /// As tch-distributed's `CollectiveCall::describe` and PyTorch's logs put it.
    pub fn describe(&self) -> String {
        let mut args = Vec::new();
        if let Some(op) = &self.reduce_op {
            args.push(format!("op={op}"));
        }
        if let Some(root) = self.root {
            args.push(format!("root={root}"));
        }
        let tensor = self.dtype.as_ref().map(|d| format!(" {d}[{}]", self.numel)).unwrap_or_default();
        format!("{}({}){tensor}", self.op, args.join(", "))
    }

    /// Whether the input held `value` (as float32 or float64).
    pub fn carried(&self, value: f64) -> bool {
        self.values.iter().flatten().any(|x| (x - value).abs() <= 1e-6 * value.abs().max(1e-12))
    }

    /// What the call is, without the rank or its number: equal on every rank.
    fn signature(&self) -> (&str, &Option<String>, Option<usize>, &Option<String>, i64) {
        (&self.op, &self.reduce_op, self.root, &self.dtype, self.numel)
    }
}

/// The collectives of each rank, in the order issued.
pub fn by_rank(trace: &[Record]) -> BTreeMap<usize, Vec<Call>> {
    let mut out: BTreeMap<usize, Vec<Call>> = BTreeMap::new();
    for call in trace.iter().filter_map(Call::from_record) {
        out.entry(call.rank).or_default().push(call);
    }
    for calls in out.values_mut() {
        calls.sort_by_key(|c| (c.group, c.seq));
    }
    out
}

/// PyTorch's DETAIL desync check: the first sequence number at which ranks of a group
/// issued different collectives, naming the ranks and both calls. Point-to-point
/// `send`s and `recv`s are left out: they differ between ranks by design (a pipeline's
/// first stage only sends forward, its last only receives) and are numbered apart.
pub fn desync(trace: &[Record]) -> Option<String> {
    let mut at: BTreeMap<(u64, u64), Vec<Call>> = BTreeMap::new();
    let calls = trace.iter().filter_map(Call::from_record);
    for call in calls.filter(|c| !tch_distributed::debug::is_point_to_point(&c.op)) {
        at.entry((call.group, call.seq)).or_default().push(call);
    }
    for ((group, seq), calls) in at {
        let first = &calls[0];
        if let Some(other) = calls.iter().find(|c| c.signature() != first.signature()) {
            let (a, b) = if first.rank < other.rank { (first, other) } else { (other, first) };
            return Some(format!(
                "the ranks' collectives differ at call #{seq} of group {group}: rank {} issued {}, rank {} issued {}",
                a.rank,
                a.describe(),
                b.rank,
                b.describe()
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(
        rank: usize,
        seq: u64,
        op: &str,
        reduce_op: Option<&str>,
        root: Option<usize>,
        values: &[f64],
    ) -> Record {
        let mut record = Record::now(Collective {
            op: op.into(),
            reduce_op: reduce_op.map(String::from),
            root,
            dtype: Some("Double".into()),
            numel: values.len() as i64,
            seq,
            group: 0,
            values: Some(values.to_vec()),
            site: None,
        });
        record.rank = Some(rank);
        record
    }

    #[test]
    fn the_first_differing_call_is_named_with_both_ranks() {
        let trace = vec![
            event(0, 0, "barrier", None, None, &[]),
            event(1, 0, "barrier", None, None, &[]),
            event(1, 1, "reduce", Some("SUM"), Some(0), &[3.0]),
            event(0, 1, "all_reduce", Some("SUM"), None, &[2.0]),
            event(0, 2, "barrier", None, None, &[]),
        ];
        assert_eq!(
            desync(&trace).unwrap(),
            "the ranks' collectives differ at call #1 of group 0: rank 0 issued all_reduce(op=SUM) Double[1], rank 1 issued reduce(op=SUM, root=0) Double[1]"
        );
        // The same call with other values is no desync.
        let agreed = vec![
            event(0, 0, "reduce", Some("SUM"), Some(0), &[2.0]),
            event(1, 0, "reduce", Some("SUM"), Some(0), &[5.0]),
        ];
        assert_eq!(desync(&agreed), None);
    }

    #[test]
    fn point_to_point_calls_are_no_desync() {
        // A two-stage pipeline: rank 0 sends activations and receives gradients, rank 1
        // the other way round; their sends and recvs share numbers with the barrier's.
        let trace = vec![
            event(0, 0, "barrier", None, None, &[]),
            event(1, 0, "barrier", None, None, &[]),
            event(0, 0, "send", None, Some(1), &[1.0, 2.0]),
            event(1, 0, "recv", None, Some(0), &[0.0]),
            event(0, 1, "recv", None, Some(1), &[0.0, 0.0, 0.0]),
            event(1, 1, "send", None, Some(0), &[3.0]),
            event(0, 1, "broadcast", None, Some(1), &[0.5]),
            event(1, 1, "broadcast", None, Some(1), &[0.5]),
        ];
        assert_eq!(desync(&trace), None);
        // The collectives among them are still compared.
        let mut differing = trace;
        differing.push(event(0, 2, "all_reduce", Some("SUM"), None, &[1.0]));
        differing.push(event(1, 2, "barrier", None, None, &[]));
        assert!(desync(&differing).unwrap().contains("call #2 of group 0"));
    }

    #[test]
    fn a_call_carries_a_value_in_float32_too() {
        let call =
            Call::from_record(&event(0, 0, "reduce", Some("SUM"), Some(1), &[f64::from(652.1234_f32)]))
                .unwrap();
        assert!(call.carried(652.1234));
        assert!(!call.carried(652.2));
        assert_eq!(call.describe(), "reduce(op=SUM, root=1) Double[1]");
    }
}
