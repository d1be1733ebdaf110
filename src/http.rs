//! The CLI's HTTP for models by link: one blocking GET at a time through ureq, redirects left
//! to the core (the Hub's headers are on the redirect itself).

use std::time::Duration;

use headprint::weights::remote::{Response, Transport};

pub struct UreqTransport {
    agent: ureq::Agent,
}

impl UreqTransport {
    pub fn new() -> Self {
        let config = ureq::Agent::config_builder()
            .max_redirects(0)
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(20)))
            .timeout_recv_response(Some(Duration::from_secs(60)))
            .user_agent(concat!("headprint/", env!("CARGO_PKG_VERSION")))
            .build();
        Self { agent: ureq::Agent::new_with_config(config) }
    }
}

impl Transport for UreqTransport {
    fn get(&self, url: &str, range: Option<(u64, u64)>, authorization: Option<&str>) -> Result<Response, String> {
        let mut request = self.agent.get(url);
        if let Some((first, last)) = range {
            request = request.header("Range", format!("bytes={first}-{last}"));
        }
        if let Some(authorization) = authorization {
            request = request.header("Authorization", authorization);
        }
        let response = request.call().map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| (name.as_str().to_ascii_lowercase(), value.to_str().unwrap_or_default().to_string()))
            .collect();
        Ok(Response { status, headers, body: Box::new(response.into_body().into_reader()) })
    }

    fn wait(&self, seconds: f64) {
        std::thread::sleep(Duration::from_secs_f64(seconds.max(0.0)));
    }
}
