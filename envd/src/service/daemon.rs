//! hangar's `hangar.envd.v1.Daemon` service: the daemon's own description (versions, limits,
//! capabilities), which is also how the relay tells hangar-envd from E2B's envd.
use std::sync::Arc;

use hangar_proto::ext::{daemon_server::Daemon, InfoRequest, InfoResponse, Limits};
use tonic::{Request, Response, Status};

use super::{Core, ENVD_VERSION};

pub struct DaemonService {
    core: Arc<Core>,
}

impl DaemonService {
    pub fn new(core: Arc<Core>) -> Self {
        Self { core }
    }
}

#[tonic::async_trait]
impl Daemon for DaemonService {
    async fn info(&self, _req: Request<InfoRequest>) -> Result<Response<InfoResponse>, Status> {
        let t = &self.core.table;
        Ok(Response::new(InfoResponse {
            version: env!("CARGO_PKG_VERSION").to_string(),
            envd_version: ENVD_VERSION.to_string(),
            limits: Some(Limits {
                ring_bytes: t.ring_bytes(),
                max_message_bytes: self.core.max_message_bytes,
                exited_retention_seconds: t.retention().as_secs() as u32,
                max_watches: self.core.max_watches,
                max_follows: self.core.follows.max(),
                subscriber_queue_bytes: t.ring_bytes(),
                watch_queue_events: self.core.watches.settings().queue_events as u32,
                watcher_idle_seconds: self.core.watches.settings().watcher_idle.as_secs() as u32,
            }),
            capabilities: [
                "process.attach",
                "process.signal",
                "process.list_exited",
                "process.group_signals",
                "process.start_backpressure",
                "process.tree_kill",
                "files.follow",
                "files.watch",
            ]
            .into_iter()
            // Kills reach everything a process started through its own cgroup (not only by marks).
            .chain(t.uses_cgroups().then_some("process.cgroups"))
            .map(String::from)
            .collect(),
        }))
    }
}
