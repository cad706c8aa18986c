//! `ferry logs JOB [--rank N] [-f]`.

use futures_util::StreamExt;
use reqwest::Method;
use tokio::io::AsyncWriteExt;

use crate::args::LogsArgs;
use crate::client::Client;

pub async fn run(client: &Client, args: LogsArgs) -> anyhow::Result<()> {
    let path = format!(
        "/api/v1/namespaces/{}/jobs/{}/logs?rank={}&follow={}",
        args.namespace, args.job, args.rank, args.follow
    );
    let resp = client.send(Method::GET, &path, None).await?;
    let mut body = resp.bytes_stream();
    let mut out = tokio::io::stdout();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| anyhow::anyhow!("log stream broke: {e}"))?;
        if out.write_all(&chunk).await.is_err() {
            // A closed pipe (`ferry logs | head`) is not an error.
            return Ok(());
        }
        let _ = out.flush().await;
    }
    Ok(())
}
