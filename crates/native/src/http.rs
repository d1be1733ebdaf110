//! The CLI's HTTP for models by link: one blocking GET at a time through ureq, redirects left
//! to the core (the Hub's headers are on the redirect itself). A server that stops answering is
//! given up on after the read timeout, while connecting, before its status line and between
//! two reads of a body; the core then asks again for what is missing.

use std::io::{self, Read};
use std::time::Duration;

use headprint::weights::remote::{Response, Transport};

pub struct UreqTransport {
    agent: ureq::Agent,
}

impl UreqTransport {
    pub fn new(read_timeout: Duration) -> Self {
        let config = ureq::Agent::config_builder()
            .max_redirects(0)
            .http_status_as_error(false)
            .timeout_connect(Some(read_timeout))
            .timeout_recv_response(Some(read_timeout))
            // Restarts with each read: a slow body is fine as long as bytes keep coming.
            .timeout_per_read(Some(read_timeout))
            .user_agent(concat!("headprint/", env!("CARGO_PKG_VERSION")))
            .build();
        Self { agent: ureq::Agent::new_with_config(config) }
    }
}

/// A ureq error as an I/O error whose kind says whether the server stopped answering (the core
/// tells a stall from a broken connection by `TimedOut`).
fn io_error(error: ureq::Error) -> io::Error {
    match error {
        ureq::Error::Timeout(_) => io::Error::new(io::ErrorKind::TimedOut, error.to_string()),
        ureq::Error::Io(error) => error,
        other => io::Error::other(other.to_string()),
    }
}

/// A body whose read timeouts come out as `TimedOut` (ureq wraps them in `Other`).
struct Body<R>(R);

impl<R: Read> Read for Body<R> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        self.0.read(buffer).map_err(|error| {
            let timed_out = error
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<ureq::Error>())
                .is_some_and(|inner| matches!(inner, ureq::Error::Timeout(_)));
            if timed_out { io::Error::new(io::ErrorKind::TimedOut, error.to_string()) } else { error }
        })
    }
}

impl Transport for UreqTransport {
    fn get(&self, url: &str, range: Option<(u64, u64)>, authorization: Option<&str>) -> io::Result<Response> {
        let mut request = self.agent.get(url);
        if let Some((first, last)) = range {
            request = request.header("Range", format!("bytes={first}-{last}"));
        }
        if let Some(authorization) = authorization {
            request = request.header("Authorization", authorization);
        }
        let response = request.call().map_err(io_error)?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| (name.as_str().to_ascii_lowercase(), value.to_str().unwrap_or_default().to_string()))
            .collect();
        Ok(Response { status, headers, body: Box::new(Body(response.into_body().into_reader())) })
    }

    fn wait(&self, seconds: f64) {
        std::thread::sleep(Duration::from_secs_f64(seconds.max(0.0)));
    }
}
