//! The kubernetes provider's settings (`hangar-relay serve` flags, each with a
//! `HANGAR_KUBERNETES_*` variable; docs/kubernetes.md lists them).
use std::{path::PathBuf, time::Duration};

use clap::{Args, ValueEnum};

/// How the relay reaches a pod's daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Reach {
    /// `pod-ip` inside a cluster (`KUBERNETES_SERVICE_HOST` is set), else `port-forward`.
    Auto,
    /// The pod's IP, port 49983: the relay runs in the cluster (or routes to its pod network).
    PodIp,
    /// The API server's port-forward, one stream per connection: the relay runs outside.
    PortForward,
}

impl Reach {
    /// `Auto` decided.
    pub fn resolve(self) -> Reach {
        match self {
            Reach::Auto if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some_and(|v| !v.is_empty()) => Reach::PodIp,
            Reach::Auto => Reach::PortForward,
            r => r,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Reach::Auto => "auto",
            Reach::PodIp => "pod-ip",
            Reach::PortForward => "port-forward",
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct Settings {
    /// The kubeconfig file the kubernetes provider uses (default: kube's inference: KUBECONFIG,
    /// then ~/.kube/config, then the in-cluster service account).
    #[arg(long = "kubernetes-kubeconfig", env = "HANGAR_KUBERNETES_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use (default: its current context).
    #[arg(long = "kubernetes-context", env = "HANGAR_KUBERNETES_CONTEXT")]
    pub context: Option<String>,

    /// The namespace sandbox pods are made in (default: the kubeconfig context's, or the
    /// service account's in a cluster).
    #[arg(long = "kubernetes-namespace", env = "HANGAR_KUBERNETES_NAMESPACE")]
    pub namespace: Option<String>,

    /// How the relay reaches a pod's daemon: auto, pod-ip or port-forward.
    #[arg(long = "kubernetes-reach", env = "HANGAR_KUBERNETES_REACH", value_enum, default_value = "auto")]
    pub reach: Reach,

    /// Seconds a new pod gets to become ready and its daemon to answer (image pulls count).
    #[arg(long = "kubernetes-start-seconds", env = "HANGAR_KUBERNETES_START_SECONDS", default_value_t = 180.0)]
    pub start_seconds: f64,
}

impl Settings {
    pub fn start_timeout(&self) -> Duration {
        let s = if self.start_seconds.is_nan() { 1.0 } else { self.start_seconds };
        Duration::from_secs_f64(s.clamp(1.0, 3600.0))
    }
}
