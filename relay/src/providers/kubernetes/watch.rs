//! The watch on sandbox pods: one kube-rs `watcher` on the namespace, selecting the
//! `hangar.sandbox` label, for the relay's life. A pod deleted outside hangar, evicted, or ended
//! (its node lost, its main process gone) is reported to `sessions::gone` (through `providers::gone`); so, after each full
//! listing, is every sandbox whose pod is missing from it (it vanished while the watch was down).
use std::{collections::HashSet, sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{
    watcher::{self, Event},
    WatchStreamExt,
};
use tokio::sync::{Notify, OnceCell};

use super::{
    connect,
    pod::{sandbox_of, LABEL_SANDBOX},
    Cluster, Settings,
};
use crate::{events, providers::gone::GoneSender};

/// How long the watch waits for a cluster before it tries again on its own.
const RETRY: Duration = Duration::from_secs(30);

/// Why a pod that is still listed counts as vanished, if it does.
fn ended(pod: &Pod) -> Option<String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Some("its pod is being deleted outside hangar".into());
    }
    let status = pod.status.as_ref()?;
    match status.phase.as_deref() {
        Some(p @ ("Failed" | "Succeeded")) => {
            let why = status.reason.as_deref().or(status.message.as_deref()).unwrap_or("its container ended");
            Some(format!("its pod ended ({p}: {why})"))
        }
        _ => None,
    }
}

pub(super) async fn run(settings: Settings, cluster: Arc<OnceCell<Cluster>>, connected: Arc<Notify>, gone: GoneSender) {
    let mut said = false;
    let cluster = loop {
        match cluster.get_or_try_init(|| connect(&settings)).await {
            Ok(c) => break c.clone(),
            Err(e) => {
                if !said {
                    events::KubernetesUnavailable { error: &e.to_string() }.emit();
                    said = true;
                }
                tokio::select! {
                    _ = connected.notified() => {}
                    _ = tokio::time::sleep(RETRY) => {}
                }
            }
        }
    };
    // Sandboxes created within this margin before a listing may not have had their pod yet.
    let margin = settings.start_timeout().as_secs() as i64 + 60;
    let config = watcher::Config::default().labels(LABEL_SANDBOX);
    let mut stream = watcher::watcher(cluster.pods(), config).default_backoff().boxed();
    let mut listing: Option<(HashSet<String>, i64)> = None;
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => listing = Some((HashSet::new(), crate::store::now())),
            Ok(Event::InitApply(pod)) => {
                let Some(id) = pod.metadata.name.as_deref().and_then(sandbox_of) else { continue };
                match ended(&pod) {
                    Some(why) => gone.vanished(&id, &why),
                    None => {
                        if let Some((ids, _)) = listing.as_mut() {
                            ids.insert(id);
                        }
                    }
                }
            }
            Ok(Event::InitDone) => {
                if let Some((ids, listed_at)) = listing.take() {
                    gone.present("kubernetes", ids, listed_at - margin);
                }
            }
            Ok(Event::Apply(pod)) => {
                let Some(id) = pod.metadata.name.as_deref().and_then(sandbox_of) else { continue };
                if let Some(why) = ended(&pod) {
                    gone.vanished(&id, &why);
                }
            }
            Ok(Event::Delete(pod)) => {
                let Some(id) = pod.metadata.name.as_deref().and_then(sandbox_of) else { continue };
                gone.vanished(&id, "its pod was deleted outside hangar (or evicted, or its node lost)");
            }
            Err(e) => events::KubernetesWatchTrouble { error: &e.to_string() }.emit(),
        }
    }
}
