//! One check of the loaded configuration, the file's keys and the flags over them, each
//! error naming the key.

use super::{check_forwarder_names, check_scrape_targets, ConfigError, ServerConfig};

impl ServerConfig {
    /// Refuses settings that cannot work, naming the key (and its flag): called once, on
    /// the file with the flags over it. A body limit of 0 refused every request, a
    /// retention of 0 deleted data as it came, a segment size of 0 started a segment at
    /// every write.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some((key, addr)) = self.open_listeners().next() {
            if !self.server.allow_unauthenticated {
                let flag = key.replace('_', "-");
                return Err(format!(
                    "server.{key} (--{flag}) {addr} listens beyond this machine, and no \
                     credentials are configured (auth.credentials): whoever reaches it could \
                     read every profile and span and write data. Configure credentials (see \
                     docs/security.md), bind loopback ({}:{}), or say it is meant with \
                     server.allow_unauthenticated: true (--allow-unauthenticated), behind a \
                     firewall or an authenticating proxy",
                    std::net::Ipv4Addr::LOCALHOST,
                    addr.port()
                )
                .into());
            }
        }
        if self.server.max_body_size == 0 || self.server.max_decompressed_size == 0 {
            return Err(
                "server.max_body_size and server.max_decompressed_size must not be 0: \
                 every request would be refused (give a size such as 32MiB)"
                    .into(),
            );
        }
        self.storage.validate()?;
        self.validate_server()?;
        self.validate_receivers()?;
        for f in &self.exporters {
            f.check()
                .map_err(|e| ConfigError::within(format!("exporters {:?}", f.name), e))?;
        }
        self.processors.validate()?;
        check_forwarder_names(&self.exporters)?;
        if !self.storage.store_enabled() && self.exporters.is_empty() && self.remote.is_none() {
            return Err(
                "the store is off (--no-store, storage.enabled: false) and there is no \
                 forwarder: every push would be answered 200 and none of it kept; add one \
                 (--forward-otlp-grpc, --forward-otlp-http, or exporters in the config file), \
                 or leave the store on"
                    .into(),
            );
        }
        Ok(())
    }

    /// The `server` section: TLS, host names, request limits, the query timeout.
    fn validate_server(&self) -> Result<(), ConfigError> {
        if let Some(tls) = &self.server.tls {
            tls.check()?;
        }
        if let Some(bad) = self
            .server
            .allowed_hosts
            .iter()
            .find(|h| h.is_empty() || h.contains([':', '/', ' ']))
        {
            return Err(format!(
                "server.allowed_hosts: {bad:?} is not a host name (give names without port or \
                 scheme, such as spanprof.internal)"
            )
            .into());
        }
        let one_request = self
            .server
            .max_body_size
            .saturating_add(self.server.max_decompressed_size);
        if self.server.max_inflight_size != 0 && self.server.max_inflight_size < one_request {
            return Err(format!(
                "server.max_inflight_size ({} bytes) must hold one request of the largest size \
                 allowed: max_body_size + max_decompressed_size = {one_request} bytes (or be 0 \
                 for no limit)",
                self.server.max_inflight_size
            )
            .into());
        }
        if self.server.query_timeout.is_zero() {
            return Err(
                "server.query_timeout 0s would stop every query at once: give a time such as \
                 30s"
                .into(),
            );
        }
        Ok(())
    }

    /// `receivers.scrape`, from the file and `--scrape`: each target, and none twice.
    fn validate_receivers(&self) -> Result<(), ConfigError> {
        self.receivers.replica_set()?;
        for t in &self.receivers.scrape {
            let target_error = |e: ConfigError| {
                ConfigError::within(format!("receivers.scrape {:?}", t.service), e)
            };
            if !t.url.starts_with("http://") && !t.url.starts_with("https://") {
                return Err(target_error(
                    "the url must start with http:// or https://".into(),
                ));
            }
            t.check().map_err(target_error)?;
            if let Some(f) = &t.bearer_token_file {
                // Read at each scrape; a wrong path is said now rather than at every scrape.
                std::fs::metadata(f).map_err(|e| {
                    target_error(format!("bearer_token_file {}: {e}", f.display()).into())
                })?;
            }
        }
        check_scrape_targets(&self.receivers.scrape)
    }
}
