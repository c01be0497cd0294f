//! When the ranks' collectives do not match: what each rank called, and where.
//!
//! c10d's ProcessGroupWrapper (see [`GroupOptions::check_collectives`]) compares the
//! ranks' fingerprints before each collective and throws on every rank of a mismatch.
//! Its message names this rank's call in c10d's terms, and the other's only when their
//! fingerprints have the same length (otherwise it misreads a shape as an op). So each
//! rank that hits a mismatch also leaves its own call, as this crate describes it with
//! the program's line, in the store, reads the others', and says both.
//!
//! [`GroupOptions::check_collectives`]: crate::GroupOptions::check_collectives
use std::cell::RefCell;
use std::time::{Duration, Instant};

use crate::debug::CollectiveCall;
use crate::error::{classify, is_mismatch, DistError, ErrorKind};
use crate::ffi;
use crate::launch_env::restart_attempt;

/// How long a rank waits for the others' calls after a mismatch. The ranks of a
/// mismatch all fail at the same check, so they answer within milliseconds; a rank
/// inside a collective c10d issues on its own (DDP's gradient all-reduce in backward)
/// does not answer at all.
const WAIT_FOR_OTHERS: Duration = Duration::from_secs(3);

thread_local! {
    // Per thread: a collective's check runs in the thread that issues it, so the error
    // that reaches this thread's caller is about this thread's last call.
    static LAST_CALL: RefCell<Option<CollectiveCall>> = const { RefCell::new(None) };
}

/// Called for every collective this crate issues, before it starts.
pub(crate) fn remember(call: &CollectiveCall) {
    LAST_CALL.with(|last| *last.borrow_mut() = Some(call.clone()));
}

/// What [`explain`] says: a message that has it was explained already (an FSDP hook's
/// error, explained where its collective was issued, coming back through backward()).
const EXPLAINED: &str = "the ranks' collectives do not match";

pub(crate) fn is_explained(message: &str) -> bool {
    message.contains(EXPLAINED)
}

/// `call` in words, with the program's line when known.
fn described(call: &CollectiveCall) -> String {
    let site = call.site.map(|at| format!(" at {at}")).unwrap_or_default();
    format!("{}{site} (its collective #{} of group {})", call.describe(), call.seq, call.group)
}

/// Turns the wrapper's error for this thread's last call of group `group` into one
/// that says what every rank called, as far as they answer.
pub(crate) fn explain(e: DistError, what: &str, group: u64, rank: usize, world_size: usize) -> DistError {
    let mine = LAST_CALL.with(|last| last.borrow().clone()).filter(|c| c.group == group && c.rank == rank);
    let said = exchange(group, rank, world_size, mine.as_ref().map(described));
    mismatch_error(&format!("{what} on rank {rank} of {world_size}"), &said, e.message())
}

/// The wrapper's error as it reaches `backward()`: DDP's Reducer all-reduced a bucket of
/// gradients on the default group where another rank issued something else.
fn explain_backward(message: &str) -> DistError {
    let c10d = without_backtrace(message);
    if is_explained(&c10d) {
        return DistError::new(ErrorKind::Mismatch, c10d);
    }
    let Some((rank, world_size)) = crate::diagnostics::default_rank_and_size() else {
        return DistError::new(ErrorKind::Mismatch, c10d);
    };
    let mine = "DDP's all-reduce of a bucket of gradients inside backward()".to_string();
    let said = exchange(0, rank, world_size, Some(mine));
    mismatch_error(&format!("backward() on rank {rank} of {world_size}"), &said, &c10d)
}

/// libtorch's own exceptions from a distributed context (DDP's Reducer failing inside
/// `backward()` when a peer is gone, or meeting another rank's different collective),
/// classified as the shim's are.
impl From<tch::TchError> for DistError {
    fn from(e: tch::TchError) -> Self {
        let message = e.to_string();
        if is_mismatch(&message) {
            return explain_backward(&message);
        }
        DistError::new(classify(ffi::TCHD_ERR_OTHER, &message), message)
    }
}

/// Leaves this rank's call in the store and reads the others' (waiting at most
/// [`WAIT_FOR_OTHERS`]): one line per rank.
fn exchange(group: u64, rank: usize, world_size: usize, mine: Option<String>) -> Vec<String> {
    let mut calls = vec![(rank, mine)];
    let others = crate::diagnostics::with_default_store(|store| {
        let key = |r: usize| format!("tchd/mismatch/{}/{group}/{r}", restart_attempt());
        if let Some(text) = &calls[0].1 {
            // Best effort: a store that is gone leaves the others' calls unknown. The
            // ready flag after the text, so that a reader never finds the flag alone.
            if store.set(&key(rank), text.as_bytes()).is_ok() {
                let _ = store.add(&format!("{}/ready", key(rank)), 1);
            }
        }
        let mut heard: Vec<(usize, Option<String>)> =
            (0..world_size).filter(|&r| r != rank).map(|r| (r, None)).collect();
        let started = Instant::now();
        while heard.iter().any(|(_, text)| text.is_none()) && started.elapsed() < WAIT_FOR_OTHERS {
            for (r, text) in heard.iter_mut().filter(|(_, t)| t.is_none()) {
                // `add(key, 0)` answers at once: 0 while the key is unset.
                if store.add(&format!("{}/ready", key(*r)), 0).is_ok_and(|n| n > 0) {
                    *text = store.get(&key(*r)).ok().map(|b| String::from_utf8_lossy(&b).into_owned());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        heard
    });
    calls.extend(
        others.unwrap_or_else(|| (0..world_size).filter(|&r| r != rank).map(|r| (r, None)).collect()),
    );
    calls.sort_by_key(|(r, _)| *r);
    calls
        .into_iter()
        .map(|(r, text)| match text {
            Some(text) => format!("rank {r} called {text}"),
            None => format!("rank {r} did not say what it called (it may be gone, or inside a collective c10d issues on its own)"),
        })
        .collect()
}

fn mismatch_error(where_: &str, said: &[String], c10d: &str) -> DistError {
    DistError::new(
        ErrorKind::Mismatch,
        format!(
            "{where_}: {EXPLAINED}: {}. Every rank must issue the same collectives in the same order: is one inside `if rank == 0`, or did a rank leave a loop before the others?\n(c10d: {c10d})",
            said.join("; ")
        ),
    )
}

/// libtorch's message without the C++ frames tch appends to it.
fn without_backtrace(message: &str) -> String {
    let kept: Vec<&str> = message
        .lines()
        .take_while(|l| !l.starts_with("Exception raised from") && !l.starts_with("frame #"))
        .collect();
    kept.join("\n").trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ReduceOp;

    #[test]
    fn only_the_wrappers_report_is_a_mismatch() {
        assert!(is_mismatch("Detected mismatch between collectives on ranks. Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=3, OpType=REDUCE"));
        assert!(!is_mismatch("[gloo/transport/tcp/pair.cc:538] Read error: Connection reset by peer"));
        let e = DistError::from(tch::TchError::Torch(
            "Detected mismatch between collectives on ranks. Rank 1 is running collective".into(),
        ));
        assert_eq!(e.kind(), ErrorKind::Mismatch);
    }

    #[test]
    fn a_call_is_described_with_its_line() {
        let call = CollectiveCall {
            op: crate::debug::CollectiveOp::Reduce,
            reduce_op: Some(ReduceOp::Sum),
            root: Some(0),
            dtype: Some(tch::Kind::Double),
            numel: 1,
            seq: 3,
            group: 0,
            rank: 0,
            world_size: 2,
            values: None,
            site: Some(std::panic::Location::caller()),
        };
        let text = described(&call);
        assert!(text.starts_with("reduce(op=SUM, root=0) Double[1] at "), "{text}");
        assert!(
            text.contains("src/mismatch.rs:") && text.ends_with("(its collective #3 of group 0)"),
            "{text}"
        );
        // Without a default group the others cannot be asked: this rank's call alone.
        remember(&call);
        let e = explain(DistError::new(ErrorKind::Other, "Detected mismatch"), "reduce", 0, 0, 2);
        assert_eq!(e.kind(), ErrorKind::Mismatch);
        assert!(
            e.message().contains("rank 0 called reduce(op=SUM, root=0) Double[1] at "),
            "{}",
            e.message()
        );
        assert!(e.message().contains("rank 1 did not say"), "{}", e.message());
    }

    #[test]
    fn the_cpp_frames_are_left_out() {
        let message = "Internal torch error: Detected mismatch between collectives on ranks.\nException raised from verify at x.cpp:1\nframe #0: c10::Error::Error() + 0x9d";
        assert_eq!(
            without_backtrace(message),
            "Internal torch error: Detected mismatch between collectives on ranks."
        );
    }
}
