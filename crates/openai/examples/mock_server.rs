//! Serves the mock backend over the OpenAI API, for the Python client test and for
//! trying clients by hand:
//!
//! `cargo run -p ferry-openai --example mock_server -- --listen 127.0.0.1:8000 --model mock`
//!
//! Flags: `--listen ADDR:PORT` (port 0 picks a free one), `--model NAME` (repeatable),
//! `--tokens N`, `--ttft-ms MS`, `--itl-ms MS`, `--max-context N`,
//! `--max-running N`, `--max-body-bytes N`, `--max-concurrent N`, and a failure mode:
//! `--error-rate F`, `--hang`, `--fail-after N`. `GET /mock/stats` and
//! `POST /mock/failure` steer it while it runs. Prints `listening on http://ADDR` once
//! ready; Ctrl-C stops it.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use ferry_openai::{
    Failure, MockBackend, MockConfig, ServerConfig, control_router, router, serve_router,
};

fn parse<T: std::str::FromStr>(flag: &str, value: Option<String>) -> Result<T, String> {
    let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
    value
        .parse()
        .map_err(|_| format!("{flag}: cannot parse {value:?}"))
}

fn main() -> Result<(), String> {
    let mut listen = "127.0.0.1:8000".to_owned();
    let mut mock = MockConfig {
        models: Vec::new(),
        ..MockConfig::default()
    };
    let mut server = ServerConfig::default();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--listen" => listen = parse(&flag, args.next())?,
            "--model" => mock.models.push(parse(&flag, args.next())?),
            "--tokens" => mock.tokens_per_response = parse(&flag, args.next())?,
            "--ttft-ms" => {
                mock.time_to_first_token = Duration::from_millis(parse(&flag, args.next())?)
            }
            "--itl-ms" => {
                mock.inter_token_delay = Duration::from_millis(parse(&flag, args.next())?)
            }
            "--max-context" => mock.max_context = parse(&flag, args.next())?,
            "--max-running" => mock.max_running = parse(&flag, args.next())?,
            "--max-body-bytes" => server.max_body_bytes = parse(&flag, args.next())?,
            "--max-concurrent" => server.max_concurrent_requests = parse(&flag, args.next())?,
            "--error-rate" => {
                mock.failure = Failure::ErrorRate {
                    rate: parse(&flag, args.next())?,
                }
            }
            "--hang" => mock.failure = Failure::Hang,
            "--fail-after" => {
                mock.failure = Failure::FailAfter {
                    tokens: parse(&flag, args.next())?,
                }
            }
            other => return Err(format!("unknown flag {other}; see the file's doc comment")),
        }
    }
    if mock.models.is_empty() {
        mock.models.push("mock".to_owned());
    }
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&listen)
            .await
            .map_err(|e| format!("--listen {listen}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        println!("listening on http://{addr}");
        let _ = std::io::stdout().flush();
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        let mock = MockBackend::new(mock);
        let app = router(Arc::new(mock.clone()), server).merge(control_router(mock));
        serve_router(listener, app, shutdown, Duration::from_secs(5))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
}
