//! Every rank's log in one stream, each line prefixed with its rank (`[rank 2] …`): what
//! `ferry logs JOB -f` shows when no `--rank` is given. Works over any [`Runtime`].

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;

use crate::runtime::LogStream;
use crate::{GangRecord, Runtime, RuntimeError};

/// Longest partial line held back waiting for its newline; longer runs are emitted as is.
const MAX_PENDING_LINE: usize = 64 * 1024;

/// Merges the logs of all ranks, line by line as they arrive, each line prefixed
/// `[rank N] `; with `follow`, ends once every rank has ended.
pub fn merged_logs(
    runtime: &dyn Runtime,
    gang: &GangRecord,
    follow: bool,
) -> Result<LogStream, RuntimeError> {
    let mut streams = Vec::with_capacity(gang.ranks.len());
    for rank in &gang.ranks {
        streams.push(prefix_lines(
            runtime.logs(gang, rank.rank, follow)?,
            format!("[rank {}] ", rank.rank),
        ));
    }
    Ok(Box::pin(futures_util::stream::select_all(streams)))
}

/// Re-chunks `stream` into whole lines, each starting with `prefix`. A final line without
/// newline is emitted (with one added) when the stream ends.
pub fn prefix_lines(stream: LogStream, prefix: String) -> LogStream {
    struct State {
        inner: LogStream,
        prefix: Bytes,
        pending: BytesMut,
        ended: bool,
    }
    let state = State {
        inner: stream,
        prefix: Bytes::from(prefix),
        pending: BytesMut::new(),
        ended: false,
    };
    Box::pin(futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(end) = st.pending.iter().position(|&b| b == b'\n') {
                let line = st.pending.split_to(end + 1);
                return Some((Ok(with_prefix(&st.prefix, &line, false)), st));
            }
            if st.pending.len() >= MAX_PENDING_LINE || (st.ended && !st.pending.is_empty()) {
                let piece = st.pending.len().min(MAX_PENDING_LINE);
                let line = st.pending.split_to(piece);
                return Some((Ok(with_prefix(&st.prefix, &line, true)), st));
            }
            if st.ended {
                return None;
            }
            match st.inner.next().await {
                Some(Ok(chunk)) => st.pending.extend_from_slice(&chunk),
                Some(Err(e)) => {
                    st.ended = true;
                    st.pending.clear();
                    return Some((Err(e), st));
                }
                None => st.ended = true,
            }
        }
    }))
}

fn with_prefix(prefix: &[u8], line: &[u8], add_newline: bool) -> Bytes {
    let mut out = BytesMut::with_capacity(prefix.len() + line.len() + 1);
    out.extend_from_slice(prefix);
    out.extend_from_slice(line);
    if add_newline {
        out.extend_from_slice(b"\n");
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn run(chunks: &[&str]) -> String {
        let items: Vec<Result<Bytes, RuntimeError>> = chunks
            .iter()
            .map(|c| Ok(Bytes::copy_from_slice(c.as_bytes())))
            .collect();
        let stream: LogStream = Box::pin(futures_util::stream::iter(items));
        let out: Vec<Bytes> = prefix_lines(stream, "[rank 3] ".into())
            .map(|r| r.unwrap())
            .collect()
            .await;
        String::from_utf8(out.concat()).unwrap()
    }

    #[tokio::test]
    async fn lines_split_across_chunks_get_one_prefix_each() {
        assert_eq!(
            run(&["a\nb", "c\n", "\nd"]).await,
            "[rank 3] a\n[rank 3] bc\n[rank 3] \n[rank 3] d\n"
        );
        assert_eq!(run(&[]).await, "");
    }

    #[tokio::test]
    async fn an_endless_line_is_emitted_in_bounded_pieces() {
        let long = "x".repeat(MAX_PENDING_LINE * 2 + 10);
        let out = run(&[&long]).await;
        assert_eq!(out.matches("[rank 3] ").count(), 3);
        assert_eq!(out.len(), long.len() + 3 * ("[rank 3] ".len() + 1));
    }
}
