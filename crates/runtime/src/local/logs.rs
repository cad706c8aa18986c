//! Streams a rank's log file: everything written so far, and with `follow` whatever comes
//! next until the rank ends (then the rest is drained and the stream closes by itself).

use std::path::PathBuf;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncReadExt;

use super::LocalRuntime;
use crate::runtime::LogStream;
use crate::{GangRecord, RuntimeError};

/// Largest chunk one stream item carries.
const CHUNK: usize = 64 * 1024;

/// How often a followed log is re-read once it has been read to its end.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// Where a log stream is.
struct Tail {
    runtime: LocalRuntime,
    gang: GangRecord,
    rank: u32,
    path: PathBuf,
    file: Option<tokio::fs::File>,
    follow: bool,
    /// Set once the rank has ended: one more read to the end, then close.
    draining: bool,
    done: bool,
}

/// The stream behind [`Runtime::logs`](crate::Runtime::logs) for the local backend.
pub(super) fn stream(
    runtime: LocalRuntime,
    gang: GangRecord,
    rank: u32,
    follow: bool,
) -> LogStream {
    let path = gang.ranks[rank as usize].log_path.clone();
    let tail = Tail {
        runtime,
        gang,
        rank,
        path,
        file: None,
        follow,
        draining: false,
        done: false,
    };
    Box::pin(futures_util::stream::unfold(tail, |mut tail| async move {
        if tail.done {
            return None;
        }
        match tail.next_chunk().await {
            Ok(Some(chunk)) => Some((Ok(chunk), tail)),
            Ok(None) => None,
            Err(e) => {
                tail.done = true;
                Some((Err(e), tail))
            }
        }
    }))
}

impl Tail {
    /// The next non-empty chunk, or `None` at the end of the stream.
    async fn next_chunk(&mut self) -> Result<Option<Bytes>, RuntimeError> {
        loop {
            if self.file.is_none() {
                let file = tokio::fs::File::open(&self.path)
                    .await
                    .map_err(RuntimeError::io("open log file", &self.path))?;
                self.file = Some(file);
            }
            let Some(file) = self.file.as_mut() else {
                return Ok(None);
            };
            let mut buf = BytesMut::with_capacity(CHUNK);
            let n = file
                .read_buf(&mut buf)
                .await
                .map_err(RuntimeError::io("read log file", &self.path))?;
            if n > 0 {
                return Ok(Some(buf.freeze()));
            }
            if !self.follow || self.draining {
                return Ok(None);
            }
            let status = self.runtime.rank_status(&self.gang, self.rank)?;
            if status.is_finished() {
                // Its output is complete once it has ended: read what remains, then stop.
                self.draining = true;
            } else {
                tokio::time::sleep(FOLLOW_POLL).await;
            }
        }
    }
}
