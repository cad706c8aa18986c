//! A bounded worker pool that produces items in parallel and hands them to one consumer in
//! input order. Work is admitted only while the bytes in flight (produced but not yet
//! consumed) stay under a budget, so memory does not grow with the number of items.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::{Condvar, Mutex};

use crate::error::Result;

fn lock(s: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

struct State {
    next: usize,
    in_flight: usize,
    failed: bool,
}

/// Runs `produce` over `jobs` on `workers` threads and feeds results to `consume` in order.
/// `cost` estimates the bytes a job's result holds; a job starts only when it fits under
/// `budget` next to the results in flight (or when nothing is in flight).
pub fn ordered<J, T, P, C>(
    jobs: &[J],
    workers: usize,
    budget: usize,
    cost: impl Fn(&J) -> usize + Sync,
    produce: P,
    mut consume: C,
) -> Result<()>
where
    J: Sync,
    T: Send,
    P: Fn(&J) -> Result<T> + Sync,
    C: FnMut(usize, T) -> Result<()>,
{
    let state = Mutex::new(State {
        next: 0,
        in_flight: 0,
        failed: false,
    });
    let cv = Condvar::new();
    let (tx, rx) = mpsc::channel::<(usize, Result<T>)>();
    std::thread::scope(|scope| {
        for _ in 0..workers.max(1) {
            let tx = tx.clone();
            let (state, cv, cost, produce) = (&state, &cv, &cost, &produce);
            scope.spawn(move || {
                loop {
                    let idx = {
                        let mut s = lock(state);
                        loop {
                            if s.failed || s.next >= jobs.len() {
                                return;
                            }
                            let c = cost(&jobs[s.next]);
                            if s.in_flight == 0 || s.in_flight + c <= budget {
                                s.in_flight += c;
                                s.next += 1;
                                break s.next - 1;
                            }
                            s = cv.wait(s).unwrap_or_else(|e| e.into_inner());
                        }
                    };
                    let r = produce(&jobs[idx]);
                    if tx.send((idx, r)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(tx);
        let mut pending: BTreeMap<usize, T> = BTreeMap::new();
        let mut want = 0usize;
        let result = (|| {
            while want < jobs.len() {
                let Ok((idx, r)) = rx.recv() else { break };
                pending.insert(idx, r?);
                while let Some(item) = pending.remove(&want) {
                    consume(want, item)?;
                    let mut s = lock(&state);
                    s.in_flight = s.in_flight.saturating_sub(cost(&jobs[want]));
                    drop(s);
                    cv.notify_all();
                    want += 1;
                }
            }
            Ok(())
        })();
        if result.is_err() {
            lock(&state).failed = true;
            cv.notify_all();
        }
        drop(rx);
        result
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::CkptError;

    #[test]
    fn keeps_order_and_stops_on_error() {
        let jobs: Vec<usize> = (0..50).collect();
        let mut seen = Vec::new();
        ordered(
            &jobs,
            4,
            10,
            |_| 3,
            |j| Ok(j * 2),
            |i, v| {
                seen.push((i, v));
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(seen, (0..50).map(|i| (i, i * 2)).collect::<Vec<_>>());
        let r = ordered(
            &jobs,
            3,
            100,
            |_| 1,
            |&j| {
                if j == 7 {
                    Err(CkptError::Zip("boom".into()))
                } else {
                    Ok(j)
                }
            },
            |_, _| Ok(()),
        );
        assert!(r.is_err());
    }
}
