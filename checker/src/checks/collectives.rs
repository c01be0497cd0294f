//! Reading the collectives the ranks issued (labkit's trace of `tch_distributed::debug`):
//! which call carried a value, and where the ranks' calls disagree.
use std::collections::BTreeMap;
use std::ops::Deref;

use lab_trace::event::{Collective, EpochReport, TrainIndices, Weights};
use lab_trace::{CollectiveOp, Dtype, Record, ReduceOp, Trace};

use super::{Evidence, Finding};
use crate::observe::{Observation, RunKind};

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

    /// As tch-distributed's `CollectiveCall::describe` and PyTorch's logs put it (the
    /// one description, pytorch-names').
    pub fn describe(&self) -> String {
        let tensor = self.dtype.map(|d| (d.name(), self.numel));
        pytorch_names::describe(self.op, self.reduce_op, self.root, tensor)
    }

    /// Whether the input held `value` (as float32 or float64).
    pub fn carried(&self, value: f64) -> bool {
        self.values.iter().flatten().any(|x| (x - value).abs() <= 1e-6 * value.abs().max(1e-12))
    }

    /// What the call is, without the rank or its number: equal on every rank.
    fn signature(&self) -> (CollectiveOp, Option<ReduceOp>, Option<usize>, Option<Dtype>, i64) {
        (self.op, self.reduce_op, self.root, self.dtype, self.numel)
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
    for ((group, seq), calls) in aligned(trace) {
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

/// Every rank's collectives (point-to-point calls left out, see [`desync`]), gathered
/// by group and sequence number: the calls the ranks must agree on, in order.
fn aligned(trace: &[Record]) -> BTreeMap<(u64, u64), Vec<Call>> {
    let mut at: BTreeMap<(u64, u64), Vec<Call>> = BTreeMap::new();
    let calls = trace.iter().filter_map(Call::from_record);
    for call in calls.filter(|c| !c.op.is_point_to_point()) {
        at.entry((call.group, call.seq)).or_default().push(call);
    }
    at
}

// ---------------------------------------------------------------- where ranks part ways

/// Where a rank was in the lab's loop, read from its own trace records before a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Place {
    /// Before its first epoch's `train_indices`.
    BeforeTraining,
    /// In `epoch`, at `phase`.
    Epoch { epoch: usize, phase: Phase },
}

/// How far a rank was into an epoch: in the order the lab's loop goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Its `train_indices`, not yet its `weights`.
    Training,
    /// Its `weights` (training done): the barrier, the reduce, validation, the all-reduce.
    Trained,
    /// Its `epoch_report`: the epoch's figures held; printing, the checkpoint, the stop.
    Reported,
}

impl Place {
    /// Where `records` (one rank's, in order) leave the rank.
    fn after<'a>(records: impl IntoIterator<Item = &'a Record>) -> Place {
        let mut place = Place::BeforeTraining;
        for record in records {
            if let Some(t) = record.get::<TrainIndices>() {
                place = Place::Epoch { epoch: t.epoch, phase: Phase::Training };
            } else if let Some(w) = record.get::<Weights>() {
                place = Place::Epoch { epoch: w.epoch, phase: Phase::Trained };
            } else if let Some(r) = record.get::<EpochReport>() {
                place = Place::Epoch { epoch: r.epoch, phase: Phase::Reported };
            }
        }
        place
    }

    pub fn epoch(self) -> Option<usize> {
        match self {
            Place::BeforeTraining => None,
            Place::Epoch { epoch, .. } => Some(epoch),
        }
    }

    /// "before training", "in epoch 1".
    fn words(self) -> String {
        match self {
            Place::BeforeTraining => "before training".into(),
            Place::Epoch { epoch, .. } => format!("in epoch {epoch}"),
        }
    }
}

/// The collectives that a library issues on its own (their `site` is `None`): DDP's,
/// FSDP's, the pipeline's. Traces written before call sites were kept have no site for
/// any call, so a call is the program's when it has a site or is none of these.
const LIBRARY_OPS: &[CollectiveOp] = &[
    CollectiveOp::BroadcastCoalesced,
    CollectiveOp::VerifyParamsAcrossProcesses,
    CollectiveOp::AllGatherIntoTensor,
    CollectiveOp::ReduceScatterTensor,
];

impl Call {
    /// Whether the program's own line issued it (not DDP, FSDP or the pipeline).
    pub fn by_program(&self) -> bool {
        self.site.is_some() || !LIBRARY_OPS.contains(&self.op)
    }

    /// In the lab's words: "reduce (1 value) at src/main.rs:133", "DDP's broadcast".
    pub fn words(&self) -> String {
        self.at_site(self.what())
    }

    /// With every argument: "reduce(op=SUM, root=1) Double[1] at src/main.rs:133".
    fn detailed_words(&self) -> String {
        self.at_site(self.describe())
    }

    fn at_site(&self, what: String) -> String {
        match &self.site {
            // The column adds nothing a student needs to find the line.
            Some(site) => format!("{what} at {}", site.rsplit_once(':').map_or(site.as_str(), |(l, _)| l)),
            None => what,
        }
    }

    pub fn what(&self) -> String {
        match self.op {
            CollectiveOp::BroadcastCoalesced => "DDP's broadcast".to_string(),
            CollectiveOp::VerifyParamsAcrossProcesses => "DDP's check of the parameters".to_string(),
            CollectiveOp::AllGatherIntoTensor => "FSDP's all-gather".to_string(),
            CollectiveOp::ReduceScatterTensor => "FSDP's reduce-scatter".to_string(),
            op @ CollectiveOp::Barrier => op.to_string(),
            op => match self.numel {
                1 => format!("{op} (1 value)"),
                n => format!("{op} ({n} values)"),
            },
        }
    }

    /// The site's file and line, to tell which of two calls of one file comes first.
    fn line(&self) -> Option<(&str, u32)> {
        let mut parts = self.site.as_deref()?.rsplitn(3, ':');
        let (_column, line, file) = (parts.next()?, parts.next()?, parts.next()?);
        Some((file, line.parse().ok()?))
    }
}

/// Where the ranks' collectives first part ways, read as a student's mistake: what
/// each rank did there, where each rank was, whose call is the mistake and which
/// step's check it breaks. The one home of this reading: `trains`, `run_failure` and
/// every owning check ask it.
#[derive(Debug, Clone)]
pub struct Divergence {
    pub group: u64,
    pub seq: u64,
    /// What each rank of the group issued at that number; `None`: nothing, it had
    /// stopped issuing collectives (left the loop, or exited).
    pub calls: BTreeMap<usize, Option<Call>>,
    /// Where each rank was: at its call, or where its trace ends.
    pub places: BTreeMap<usize, Place>,
    /// The ranks whose call (or silence) is the mistake.
    pub culprits: Vec<usize>,
    /// The step and check whose property the mistake breaks, when it is one of the
    /// lab's steps up to the one verified; `None`: no step's own (a rank that crashed,
    /// a call no step owns), and the report stays as it was.
    pub owner: Option<(u8, &'static str)>,
    /// What happened, in the lab's words.
    pub sentence: String,
}

/// One group of ranks that did the same thing at the point of divergence.
struct Side {
    ranks: Vec<usize>,
    call: Option<Call>,
    /// Where its ranks were: the earliest of their places.
    place: Place,
}

impl Divergence {
    /// The first point where the ranks' collectives of `trace` part ways, for a
    /// verification of step `step`; `None` when they never do.
    pub fn find(trace: &[Record], step: u8, run: RunKind) -> Option<Divergence> {
        let mut per_rank: BTreeMap<usize, Vec<&Record>> = BTreeMap::new();
        for record in trace {
            if let Some(rank) = record.rank {
                per_rank.entry(rank).or_default().push(record);
            }
        }
        let aligned = aligned(trace);
        // A group's ranks: every rank that issued a collective in it.
        let mut members: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for calls in aligned.values() {
            for call in calls {
                let ranks = members.entry(call.group).or_default();
                if !ranks.contains(&call.rank) {
                    ranks.push(call.rank);
                }
            }
        }
        let differing = aligned.iter().find(|((group, _), calls)| {
            calls.len() < members[group].len() || calls.iter().any(|c| c.signature() != calls[0].signature())
        });
        let (group, seq, by_rank): (u64, u64, BTreeMap<usize, Option<Call>>) = match differing {
            Some(((group, seq), calls)) => {
                let mut by_rank: BTreeMap<usize, Option<Call>> =
                    members[group].iter().map(|&r| (r, None)).collect();
                for call in calls {
                    by_rank.insert(call.rank, Some(call.clone()));
                }
                (*group, *seq, by_rank)
            }
            // Every call the trace shows agrees, but a rank may have stopped while another
            // went on into calls it does not show (DDP's all-reduces in backward): the
            // ranks at the ends of their traces, at the default group's next number.
            None => {
                let next = aligned.keys().filter(|(g, _)| *g == 0).map(|(_, s)| s + 1).max().unwrap_or(0);
                let ranks: Vec<usize> = match members.get(&0) {
                    Some(ranks) => ranks.clone(),
                    None => per_rank.keys().copied().collect(),
                };
                if ranks.len() < 2 {
                    return None;
                }
                (0, next, ranks.into_iter().map(|r| (r, None)).collect())
            }
        };
        // Where a rank was: before its call there (the call's own record is where its
        // trace position is), or at the end of its trace.
        let place_of = |rank: usize, call: Option<&Call>| -> Place {
            let records = per_rank.get(&rank).map(Vec::as_slice).unwrap_or_default();
            let until = call
                .and_then(|c| {
                    records.iter().position(|r| {
                        r.get::<Collective>()
                            .is_some_and(|x| x.group == c.group && x.seq == c.seq && x.op == c.op)
                    })
                })
                .unwrap_or(records.len());
            Place::after(records[..until].iter().copied())
        };
        let places: BTreeMap<usize, Place> =
            by_rank.iter().map(|(&rank, call)| (rank, place_of(rank, call.as_ref()))).collect();
        // The ranks that stopped issuing collectives ended their trace in a checkpoint's
        // write or read that never finished: they died there.
        let died_in_checkpoint = |rank: usize| {
            per_rank.get(&rank).and_then(|r| r.last()).is_some_and(|r| {
                r.get::<lab_trace::event::SaveCheckpoint>().is_some()
                    || r.get::<lab_trace::event::LoadCheckpoint>().is_some()
            })
        };
        let sides = sides(&by_rank, &places);
        let latest = places.values().max().copied().unwrap_or(Place::BeforeTraining);
        // The ranks that issued nothing more, the earliest first (sides are in rank order).
        let silent = (0..sides.len()).filter(|&i| sides[i].call.is_none()).min_by_key(|&i| sides[i].place);
        // Ranks that called something where the silent ones had already gone further
        // in the loop (finished, or begun a later epoch): the silent ranks skipped that
        // call, which is the mistake (DDP made on rank 0 alone, a collective inside
        // `if global_rank == 0` met by the others' calls the trace does not show).
        let behind = silent.and_then(|silent| {
            (0..sides.len())
                .filter(|&i| sides[i].call.is_some() && sides[i].place < sides[silent].place)
                .min_by_key(|&i| sides[i].place)
        });
        let (culprit, owner) = match (silent, behind) {
            (_, Some(behind)) => {
                let side = &sides[behind];
                let call = side.call.as_ref().expect("a side with a call");
                (behind, super::owner_of(call, side.place, step, run))
            }
            // They left the loop early when they had reported an epoch that another
            // rank went on from; otherwise they died.
            (Some(silent), None) => {
                let side = &sides[silent];
                let left = matches!(side.place, Place::Epoch { phase: Phase::Reported, .. })
                    && side.place.epoch() < latest.epoch()
                    && !side.ranks.iter().any(|&r| died_in_checkpoint(r));
                if differing.is_none() && !left {
                    return None;
                }
                (silent, left.then(super::owner_of_early_leaver))
            }
            (None, None) => {
                let culprit = mistaken_side(&sides);
                let side = &sides[culprit];
                let call = side.call.as_ref().expect("a side with a call");
                (culprit, super::owner_of(call, side.place, step, run))
            }
        };
        let mut divergence = Divergence {
            group,
            seq,
            culprits: sides[culprit].ranks.clone(),
            calls: by_rank,
            places,
            owner: owner.filter(|(s, _)| *s <= step),
            sentence: String::new(),
        };
        divergence.sentence = divergence.words();
        Some(divergence)
    }

    /// The divergence in the lab's words: the mistaken side first, each other side
    /// against it, then what to look at.
    fn words(&self) -> String {
        let sides = sides(&self.calls, &self.places);
        let culprit = sides.iter().position(|s| s.ranks == self.culprits).unwrap_or(0);
        let latest = self.places.values().max().copied().unwrap_or(Place::BeforeTraining);
        sentence(&sides, culprit, latest, self.owner.is_some())
    }

    /// The finding of check `check` when this divergence is its own mistake.
    pub fn finding_for(&self, check: &str, expected: impl Into<String>) -> Option<Finding> {
        (self.owner.map(|(_, id)| id) == Some(check)).then(|| {
            let finding = Finding {
                evidence: Evidence::Broken,
                observed: format!("the ranks' collectives part ways{}: {}", self.at(), self.sentence),
                expected: expected.into(),
                ..Finding::default()
            };
            match self.culprit_call() {
                Some(call) => finding.at(call.site.as_deref(), self.label(call)),
                None => finding,
            }
        })
    }

    /// The mistaken ranks' call, when they made one (not when they had stopped).
    fn culprit_call(&self) -> Option<&Call> {
        self.calls.get(self.culprits.first()?)?.as_ref()
    }

    /// What to say beside the mistaken call's line: "only rank 0 reaches this
    /// all_reduce", or, where every rank made that call, that these ranks' arguments differ.
    fn label(&self, call: &Call) -> String {
        let who = ranks_words(&self.culprits);
        let same_op = self.calls.values().all(|c| c.as_ref().map(|c| c.op) == Some(call.op));
        if same_op {
            format!("{who} called it as {}; the others differently", call.describe())
        } else if call.by_program() {
            let reaches = if self.culprits.len() == 1 { "reaches" } else { "reach" };
            format!("only {who} {reaches} this {}", call.op)
        } else {
            format!("{who} called {} here", call.words())
        }
    }

    /// " at call #9 of group 0", when a rank's call there is in the trace.
    fn at(&self) -> String {
        match self.calls.values().any(Option::is_some) {
            true => format!(" at call #{} of group {}", self.seq, self.group),
            false => String::new(),
        }
    }

    /// "step 8's `throughput-reduced`", when a step owns it.
    pub fn owner_words(&self) -> Option<String> {
        self.owner.map(|(step, id)| format!("step {step}'s `{id}`"))
    }
}

/// The divergence of the run `run` of `obs` (the pipeline's: the pipelined run's, else
/// the one step's), if the ranks' collectives part ways in it.
pub fn divergence(obs: &Observation, run: RunKind) -> Option<Divergence> {
    let traces: Vec<&Trace> = match run {
        RunKind::Pipeline => obs.pipeline().iter().flat_map(|p| [&p.pipelined.trace, &p.cut.trace]).collect(),
        RunKind::Fsdp => obs.fsdp().iter().map(|f| &f.fsdp.trace).collect(),
        RunKind::TensorParallel => obs.tensor_parallel().iter().map(|t| &t.split.trace).collect(),
        RunKind::Mesh => obs.mesh().iter().map(|m| &m.mesh.trace).collect(),
        // The program as the step is: the main run (the others have no collectives of
        // their own, or are judged on it).
        _ => vec![&obs.main.trace],
    };
    traces.into_iter().find_map(|trace| Divergence::find(&trace.records, obs.step, run))
}

/// Check `check`'s finding when the ranks' collectives part ways in `run` and the
/// mistake is its own: every owning check's judge asks this first.
pub fn owned(obs: &Observation, run: RunKind, check: &str, expected: &str) -> Option<Finding> {
    divergence(obs, run)?.finding_for(check, expected)
}

/// The ranks grouped by what they did: the same call, or nothing at the same place;
/// each side at its earliest rank's place.
fn sides(calls: &BTreeMap<usize, Option<Call>>, places: &BTreeMap<usize, Place>) -> Vec<Side> {
    let mut sides: Vec<Side> = Vec::new();
    for (&rank, call) in calls {
        let same = sides.iter_mut().find(|s| match (&s.call, call) {
            // Silent ranks apart when they stopped at other points.
            (None, None) => s.place == places[&rank],
            (Some(a), Some(b)) => a.signature() == b.signature(),
            _ => false,
        });
        match same {
            Some(side) => {
                side.ranks.push(rank);
                side.place = side.place.min(places[&rank]);
            }
            None => sides.push(Side { ranks: vec![rank], call: call.clone(), place: places[&rank] }),
        }
    }
    sides
}

/// Which side's call is the mistake, when every side issued one. In order:
/// - the side that is behind in the loop (an earlier epoch, or an earlier phase of it):
///   the other ranks skipped the call it is at and went on to their next one;
/// - the program's own call over a library's (DDP's broadcast, FSDP's all-gathers):
///   libraries issue theirs on every rank, a program's line can be inside a condition;
/// - the minority over the majority: one rank inside `if global_rank == 0` against the rest;
/// - the earlier line of one file: the ranks at the later line skipped the earlier one;
/// - the side with the lowest rank (rank 0 is the one most often singled out).
fn mistaken_side(sides: &[Side]) -> usize {
    let mut order: Vec<usize> = (0..sides.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&sides[a], &sides[b]);
        let (ca, cb) = (a.call.as_ref().unwrap(), b.call.as_ref().unwrap());
        a.place
            .cmp(&b.place)
            .then(cb.by_program().cmp(&ca.by_program()))
            .then(a.ranks.len().cmp(&b.ranks.len()))
            .then(match (ca.line(), cb.line()) {
                (Some((fa, la)), Some((fb, lb))) if fa == fb => la.cmp(&lb),
                _ => std::cmp::Ordering::Equal,
            })
            .then(a.ranks[0].cmp(&b.ranks[0]))
    });
    order[0]
}

/// "rank 0", "ranks 1–3", "ranks 0, 2".
pub fn ranks_words(ranks: &[usize]) -> String {
    match ranks {
        [one] => format!("rank {one}"),
        [first, .., last] if last - first + 1 == ranks.len() => format!("ranks {first}–{last}"),
        _ => format!("ranks {}", ranks.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

/// [`Divergence::words`], from the sides.
fn sentence(sides: &[Side], culprit: usize, latest: Place, owned: bool) -> String {
    let mistaken = &sides[culprit];
    let who = ranks_words(&mistaken.ranks);
    let reaches = if mistaken.ranks.len() == 1 { "reaches" } else { "reach" };
    // Calls of one operation that differ in their arguments: the arguments are the news.
    let same_op =
        sides.iter().all(|s| s.call.as_ref().map(|c| &c.op) == mistaken.call.as_ref().map(|c| &c.op));
    let words = |call: &Call| if same_op { call.detailed_words() } else { call.words() };
    let mut text = match &mistaken.call {
        Some(call) => format!("{} {who} called {}", mistaken.place.words(), words(call)),
        None if owned => {
            format!("{who} left the training loop after epoch {}", mistaken.place.epoch().unwrap_or_default())
        }
        None => format!("{who} had exited {}", mistaken.place.words()),
    };
    let others: Vec<String> = sides
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != culprit)
        .map(|(_, side)| {
            let who = ranks_words(&side.ranks);
            match &side.call {
                None if side.place.epoch() > mistaken.place.epoch() => {
                    format!("{who} had already begun epoch {}", side.place.epoch().unwrap_or_default())
                }
                None => format!("{who} had exited {}", side.place.words()),
                Some(call) => match (side.place.epoch(), mistaken.place.epoch()) {
                    (Some(theirs), mine) if Some(theirs) > mine => {
                        format!("{who} had already begun epoch {theirs} ({})", words(call))
                    }
                    _ => format!("{who} called {} {}", words(call), side.place.words()),
                },
            }
        })
        .collect();
    text.push_str(&format!(" while {}", others.join(" and ")));
    let why = match &mistaken.call {
        None if owned => format!(
            ": {who} stopped alone; every rank must take the same decision to stop (from the metrics every rank holds, all-reduced), or the others wait for {who} in epoch {}",
            latest.epoch().unwrap_or_default()
        ),
        None => String::new(),
        Some(_) if same_op => {
            ": every rank must call it with the same arguments (the same root, operation and size)".into()
        }
        Some(call) if call.by_program() => {
            let condition = if mistaken.ranks == [0] { "`if global_rank == 0`" } else { "a condition on the rank" };
            format!(": a collective only {who} {reaches}; is it inside {condition}?")
        }
        Some(call) if matches!(call.op, CollectiveOp::AllGatherIntoTensor | CollectiveOp::ReduceScatterTensor) => {
            ": FSDP's collectives run on every rank only when every rank shards the same model alike".into()
        }
        Some(_) => ": DDP's collectives run on every rank only when every rank wraps the same model in DDP".into(),
    };
    text.push_str(&why);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(
        rank: usize,
        seq: u64,
        op: CollectiveOp,
        reduce_op: Option<ReduceOp>,
        root: Option<usize>,
        values: &[f64],
    ) -> Record {
        let mut record = Record::now(Collective {
            op,
            reduce_op,
            root,
            dtype: Some(Dtype::Double),
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
            event(0, 0, CollectiveOp::Barrier, None, None, &[]),
            event(1, 0, CollectiveOp::Barrier, None, None, &[]),
            event(1, 1, CollectiveOp::Reduce, Some(ReduceOp::Sum), Some(0), &[3.0]),
            event(0, 1, CollectiveOp::AllReduce, Some(ReduceOp::Sum), None, &[2.0]),
            event(0, 2, CollectiveOp::Barrier, None, None, &[]),
        ];
        assert_eq!(
            desync(&trace).unwrap(),
            "the ranks' collectives differ at call #1 of group 0: rank 0 issued all_reduce(op=SUM) Double[1], rank 1 issued reduce(op=SUM, root=0) Double[1]"
        );
        // The same call with other values is no desync.
        let agreed = vec![
            event(0, 0, CollectiveOp::Reduce, Some(ReduceOp::Sum), Some(0), &[2.0]),
            event(1, 0, CollectiveOp::Reduce, Some(ReduceOp::Sum), Some(0), &[5.0]),
        ];
        assert_eq!(desync(&agreed), None);
    }

    #[test]
    fn point_to_point_calls_are_no_desync() {
        // A two-stage pipeline: rank 0 sends activations and receives gradients, rank 1
        // the other way round; their sends and recvs share numbers with the barrier's.
        let trace = vec![
            event(0, 0, CollectiveOp::Barrier, None, None, &[]),
            event(1, 0, CollectiveOp::Barrier, None, None, &[]),
            event(0, 0, CollectiveOp::Send, None, Some(1), &[1.0, 2.0]),
            event(1, 0, CollectiveOp::Recv, None, Some(0), &[0.0]),
            event(0, 1, CollectiveOp::Recv, None, Some(1), &[0.0, 0.0, 0.0]),
            event(1, 1, CollectiveOp::Send, None, Some(0), &[3.0]),
            event(0, 1, CollectiveOp::Broadcast, None, Some(1), &[0.5]),
            event(1, 1, CollectiveOp::Broadcast, None, Some(1), &[0.5]),
        ];
        assert_eq!(desync(&trace), None);
        // The collectives among them are still compared.
        let mut differing = trace;
        differing.push(event(0, 2, CollectiveOp::AllReduce, Some(ReduceOp::Sum), None, &[1.0]));
        differing.push(event(1, 2, CollectiveOp::Barrier, None, None, &[]));
        assert!(desync(&differing).unwrap().contains("call #2 of group 0"));
    }

    #[test]
    fn a_call_carries_a_value_in_float32_too() {
        let call = Call::from_record(&event(
            0,
            0,
            CollectiveOp::Reduce,
            Some(ReduceOp::Sum),
            Some(1),
            &[f64::from(652.1234_f32)],
        ))
        .unwrap();
        assert!(call.carried(652.1234));
        assert!(!call.carried(652.2));
        assert_eq!(call.describe(), "reduce(op=SUM, root=1) Double[1]");
    }

    // ------------------------------------------------------------ divergences

    /// One rank's trace of the lab's program (step 11's loop, as labkit traces it):
    /// each collective numbered as the rank issues it, `skip` leaving out the calls a
    /// broken program does not make on that rank, `epochs` epochs trained.
    struct Lab {
        rank: usize,
        seq: u64,
        records: Vec<Record>,
    }

    impl Lab {
        fn new(rank: usize) -> Lab {
            Lab { rank, seq: 0, records: Vec::new() }
        }

        fn push(&mut self, event: impl Into<lab_trace::Event>) {
            let mut record = Record::now(event);
            record.rank = Some(self.rank);
            self.records.push(record);
        }

        fn call(&mut self, op: CollectiveOp, numel: i64, site: Option<&str>) {
            let (reduce_op, root, dtype) = match op {
                CollectiveOp::Reduce => (Some(ReduceOp::Sum), Some(0), Some(Dtype::Double)),
                CollectiveOp::AllReduce => (Some(ReduceOp::Sum), None, Some(Dtype::Double)),
                CollectiveOp::Barrier => (None, None, None),
                _ => (None, Some(0), Some(Dtype::Float)),
            };
            self.push(Collective {
                op,
                reduce_op,
                root,
                dtype,
                numel,
                seq: self.seq,
                group: 0,
                values: None,
                site: site.map(String::from),
            });
            self.seq += 1;
        }

        fn before_training(&mut self, barrier: bool) -> &mut Lab {
            if barrier {
                self.call(CollectiveOp::Barrier, 0, Some("src/main.rs:93:5"));
            }
            self.call(CollectiveOp::VerifyParamsAcrossProcesses, 0, None);
            self.call(CollectiveOp::BroadcastCoalesced, 174_690, None);
            self
        }

        /// One epoch; `skip` names the program's calls this rank leaves out.
        fn epoch(&mut self, epoch: usize, skip: &[CollectiveOp]) -> &mut Lab {
            self.push(TrainIndices { epoch, indices: vec![0; 40] });
            for _ in 0..3 {
                self.call(CollectiveOp::BroadcastCoalesced, 912, None);
            }
            self.push(Weights { epoch, digest: "d".into(), projection: [0.0; 8] });
            for (op, numel, site) in [
                (CollectiveOp::Barrier, 0, "src/main.rs:124:9"),
                (CollectiveOp::Reduce, 1, "src/main.rs:133:9"),
            ] {
                if !skip.contains(&op) {
                    self.call(op, numel, Some(site));
                }
            }
            // DDP's forward in validation broadcasts the buffers too.
            self.call(CollectiveOp::BroadcastCoalesced, 912, None);
            if !skip.contains(&CollectiveOp::AllReduce) {
                self.call(CollectiveOp::AllReduce, 2, Some("src/main.rs:140:9"));
            }
            self.push(EpochReport {
                epoch,
                cumulative_time: 1.0,
                epoch_time: 1.0,
                images_per_sec: 10.0,
                validation_loss: 2.0,
                validation_accuracy: 0.1,
            });
            self
        }
    }

    fn trace_of(ranks: Vec<Lab>) -> Vec<Record> {
        ranks.into_iter().flat_map(|r| r.records).collect()
    }

    /// Every rank runs `epochs` epochs; rank 0 alone makes the calls in `rank0_only`.
    fn only_rank_0(world: usize, epochs: usize, rank0_only: &[CollectiveOp]) -> Vec<Record> {
        trace_of(
            (0..world)
                .map(|rank| {
                    let mut lab = Lab::new(rank);
                    lab.before_training(true);
                    for epoch in 0..epochs {
                        lab.epoch(epoch, if rank == 0 { &[] } else { rank0_only });
                    }
                    lab
                })
                .collect(),
        )
    }

    #[test]
    fn a_reduce_on_rank_0_alone_is_step_8s_on_four_ranks_and_on_two() {
        let trace = only_rank_0(4, 2, &[CollectiveOp::Reduce]);
        let d = Divergence::find(&trace, 11, RunKind::Main).unwrap();
        assert_eq!(d.owner, Some((8, crate::checks::step_08::THROUGHPUT_REDUCED)));
        assert_eq!(d.culprits, [0]);
        assert_eq!(d.places[&0], Place::Epoch { epoch: 0, phase: Phase::Trained });
        assert_eq!(
            d.sentence,
            "in epoch 0 rank 0 called reduce (1 value) at src/main.rs:133 while ranks 1–3 called DDP's broadcast in epoch 0: a collective only rank 0 reaches; is it inside `if global_rank == 0`?"
        );
        // Two ranks: no majority; rank 0's call is the program's, rank 1's DDP's.
        let d = Divergence::find(&only_rank_0(2, 2, &[CollectiveOp::Reduce]), 11, RunKind::Main).unwrap();
        assert_eq!(
            (d.owner, d.culprits.clone()),
            (Some((8, crate::checks::step_08::THROUGHPUT_REDUCED)), vec![0])
        );
        assert!(d.sentence.contains("while rank 1 called DDP's broadcast in epoch 0"), "{}", d.sentence);
        // Before step 8 the reduce is nobody's step yet: the report stays as it was.
        assert_eq!(Divergence::find(&trace, 7, RunKind::Main).unwrap().owner, None);
    }

    #[test]
    fn a_reduce_against_a_program_call_blames_the_earlier_line() {
        // Without DDP's broadcast in validation, rank 1's next call is the all-reduce:
        // both are the program's, one rank each; rank 1 skipped line 133.
        let mut ranks = vec![Lab::new(0), Lab::new(1)];
        for lab in &mut ranks {
            lab.before_training(true);
            lab.push(TrainIndices { epoch: 0, indices: vec![0; 16] });
            lab.push(Weights { epoch: 0, digest: "d".into(), projection: [0.0; 8] });
        }
        ranks[0].call(CollectiveOp::Reduce, 1, Some("src/main.rs:133:9"));
        ranks[1].call(CollectiveOp::AllReduce, 2, Some("src/main.rs:140:9"));
        let d = Divergence::find(&trace_of(ranks), 9, RunKind::Main).unwrap();
        assert_eq!(
            (d.owner, d.culprits.clone()),
            (Some((8, crate::checks::step_08::THROUGHPUT_REDUCED)), vec![0])
        );
        assert!(d
            .sentence
            .contains("while rank 1 called all_reduce (2 values) at src/main.rs:140 in epoch 0"));
    }

    #[test]
    fn a_barrier_on_rank_0_alone_before_training_is_step_5s() {
        let mut ranks: Vec<Lab> = (0..3).map(Lab::new).collect();
        for lab in &mut ranks {
            let rank = lab.rank;
            lab.before_training(rank == 0);
        }
        let d = Divergence::find(&trace_of(ranks), 5, RunKind::Main).unwrap();
        assert_eq!((d.owner, d.culprits.clone()), (Some((5, crate::checks::step_05::DATA_BARRIER)), vec![0]));
        assert_eq!(d.places[&1], Place::BeforeTraining);
        assert_eq!(
            d.sentence,
            "before training rank 0 called barrier at src/main.rs:93 while ranks 1–2 called DDP's check of the parameters before training: a collective only rank 0 reaches; is it inside `if global_rank == 0`?"
        );
    }

    #[test]
    fn an_all_reduce_on_rank_0_alone_is_step_9s_and_the_others_had_begun_the_next_epoch() {
        let trace = only_rank_0(4, 2, &[CollectiveOp::AllReduce]);
        let d = Divergence::find(&trace, 9, RunKind::Main).unwrap();
        assert_eq!(
            (d.owner, d.culprits.clone()),
            (Some((9, crate::checks::step_09::METRICS_AVERAGED)), vec![0])
        );
        assert_eq!(d.places[&2], Place::Epoch { epoch: 1, phase: Phase::Training });
        assert_eq!(
            d.sentence,
            "in epoch 0 rank 0 called all_reduce (2 values) at src/main.rs:140 while ranks 1–3 had already begun epoch 1 (DDP's broadcast): a collective only rank 0 reaches; is it inside `if global_rank == 0`?"
        );
        // The barrier of the epoch, likewise step 8's.
        let d = Divergence::find(&only_rank_0(2, 1, &[CollectiveOp::Barrier]), 9, RunKind::Main).unwrap();
        assert_eq!(d.owner, Some((8, crate::checks::step_08::EPOCH_BARRIER)));
    }

    #[test]
    fn a_rank_that_stops_early_is_step_11s() {
        // Rank 0 decides alone to stop after epoch 0; rank 1 begins epoch 1, whose DDP
        // broadcast rank 0 never joins.
        let mut ranks = vec![Lab::new(0), Lab::new(1)];
        for lab in &mut ranks {
            lab.before_training(true).epoch(0, &[]);
        }
        ranks[1].push(TrainIndices { epoch: 1, indices: vec![0; 40] });
        ranks[1].call(CollectiveOp::BroadcastCoalesced, 912, None);
        let trace = trace_of(ranks);
        let d = Divergence::find(&trace, 11, RunKind::Main).unwrap();
        assert_eq!(
            (d.owner, d.culprits.clone()),
            (Some((11, crate::checks::step_11::RANKS_STOP_TOGETHER)), vec![0])
        );
        assert_eq!(d.calls[&0], None);
        assert!(
            d.sentence.starts_with(
                "rank 0 left the training loop after epoch 0 while rank 1 had already begun epoch 1 (DDP's broadcast): rank 0 stopped alone"
            ),
            "{}",
            d.sentence
        );
        // Before step 11 no step owns it.
        assert_eq!(Divergence::find(&trace, 10, RunKind::Main).unwrap().owner, None);
    }

    #[test]
    fn a_rank_that_stops_early_is_step_11s_when_the_others_next_calls_are_not_traced() {
        // As recorded: rank 1's next call is the Reducer's all-reduce in backward, which
        // the trace does not show; only its `train_indices` of epoch 1 does.
        let mut ranks = vec![Lab::new(0), Lab::new(1), Lab::new(2)];
        for lab in &mut ranks {
            lab.before_training(true).epoch(0, &[]);
        }
        for lab in &mut ranks[1..] {
            lab.push(TrainIndices { epoch: 1, indices: vec![0; 40] });
        }
        let d = Divergence::find(&trace_of(ranks), 11, RunKind::Main).unwrap();
        assert_eq!(
            (d.owner, d.culprits.clone()),
            (Some((11, crate::checks::step_11::RANKS_STOP_TOGETHER)), vec![0])
        );
        assert!(
            d.sentence.starts_with(
                "rank 0 left the training loop after epoch 0 while ranks 1–2 had already begun epoch 1: rank 0 stopped alone"
            ),
            "{}",
            d.sentence
        );
        assert!(!d
            .finding_for(crate::checks::step_11::RANKS_STOP_TOGETHER, "")
            .unwrap()
            .observed
            .contains("call #"));
    }

    #[test]
    fn a_rank_that_died_is_no_steps_mistake() {
        // Rank 1 dies while training epoch 0: it issued nothing more, rank 0 went on.
        let mut ranks = vec![Lab::new(0), Lab::new(1)];
        ranks[0].before_training(true).epoch(0, &[]);
        ranks[1].before_training(true);
        ranks[1].push(TrainIndices { epoch: 0, indices: vec![0; 40] });
        ranks[1].call(CollectiveOp::BroadcastCoalesced, 912, None);
        let d = Divergence::find(&trace_of(ranks), 11, RunKind::Main).unwrap();
        assert_eq!((d.owner, d.culprits.clone()), (None, vec![1]));
        assert!(d
            .sentence
            .starts_with("rank 1 had exited in epoch 0 while rank 0 called DDP's broadcast in epoch 0"));
    }

    #[test]
    fn a_divergence_of_the_librarys_own_calls_is_ddps() {
        // Ranks that built other models: DDP's broadcasts differ in size.
        let mut ranks = vec![Lab::new(0), Lab::new(1)];
        ranks[0].call(CollectiveOp::BroadcastCoalesced, 912, None);
        ranks[1].call(CollectiveOp::BroadcastCoalesced, 900, None);
        let d = Divergence::find(&trace_of(ranks), 7, RunKind::Main).unwrap();
        assert_eq!(
            (d.owner, d.culprits.clone()),
            (Some((7, crate::checks::step_07::WEIGHTS_SYNCHRONIZED)), vec![0])
        );
        assert_eq!(
            d.sentence,
            "before training rank 0 called broadcast_coalesced(root=0) Float[912] while rank 1 called broadcast_coalesced(root=0) Float[900] before training: every rank must call it with the same arguments (the same root, operation and size)"
        );
        // FSDP's own calls are step 14's.
        let mut ranks = vec![Lab::new(0), Lab::new(1)];
        ranks[0].call(CollectiveOp::AllGatherIntoTensor, 912, None);
        ranks[1].call(CollectiveOp::ReduceScatterTensor, 1824, None);
        let d = Divergence::find(&trace_of(ranks), 14, RunKind::Fsdp).unwrap();
        assert_eq!(d.owner, Some((14, crate::checks::step_14::FSDP_COLLECTIVES)));
        assert!(d.sentence.ends_with(
            "FSDP's collectives run on every rank only when every rank shards the same model alike"
        ));
    }

    #[test]
    fn ranks_that_agree_do_not_diverge() {
        assert!(Divergence::find(&only_rank_0(3, 2, &[]), 11, RunKind::Main).is_none());
    }
}
