//! Where a relay test's sandboxes live: a provider (and, for a provider whose backend cannot run
//! here, the test double standing in for it), the options that make a sandbox with hangar's
//! daemon or without one, and what the provider can do. The cases in [`crate::cases`] take a
//! `Platform`, so one body tests every provider that can do what it tests; each platform's test
//! file lists the cases that apply to it with [`platform_cases!`](crate::platform_cases).
//!
//! Every platform backs a sandbox with a real Docker container labelled
//! `hangar.sandbox=<sandbox id>` and `hangar.sandbox.name=<sandbox name>` (the docker provider's
//! own labels; a test double puts them on the containers it makes), so `docker::Containers`
//! removes what a test made and `docker::container_of` finds a sandbox's container.
//!
//! To add a platform: a constructor returning `Option<Platform>` (`None` only where the test must
//! skip, never under CI=true: see `docker::available`), then a test file calling
//! `platform_cases!(your_constructor; case, case, ...)` with every case that applies, and, in its
//! doc comment, the ones that do not and why.
use std::any::Any;

use serde_json::{json, Value};

use crate::{
    docker::{self, Containers, ENVD_IMAGE, PLAIN_IMAGE},
    relay::{Relay, StateDir, ADMIN},
};

/// Whether a sandbox runs hangar's daemon (or, on a platform with another, that one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Daemon {
    With,
    Without,
}

pub struct Platform {
    /// How the platform is named in messages.
    pub name: &'static str,
    /// The relay's provider name for its sandboxes.
    pub provider: &'static str,
    /// The options of a sandbox with a daemon.
    with_daemon: Value,
    /// The options of a sandbox without one; `None` where the platform has none.
    without_daemon: Option<Value>,
    /// What the relay needs in its environment to reach the platform.
    env: Vec<(String, String)>,
    /// Options the platform's sandboxes have by construction and its provider does not take (an
    /// E2B template's user): a case's option equal to one of these is left out.
    fixed: Value,
    /// What keeps the platform's test double alive, dropped with the platform.
    _backend: Option<Box<dyn Any + Send + Sync>>,
    /// The daemon has no `Follow` (E2B's envd): a turn's log is polled (`without_follow`).
    no_follow: bool,
}

impl Platform {
    /// A platform; `backend` is kept alive until it drops.
    pub fn new(
        name: &'static str,
        provider: &'static str,
        with_daemon: Value,
        without_daemon: Option<Value>,
        env: Vec<(String, String)>,
        backend: Option<Box<dyn Any + Send + Sync>>,
    ) -> Platform {
        Platform {
            name,
            provider,
            with_daemon,
            without_daemon,
            env,
            fixed: json!({}),
            _backend: backend,
            no_follow: false,
        }
    }

    /// The platform, whose sandboxes have `fixed`'s options by construction.
    pub fn with_fixed(mut self, fixed: Value) -> Platform {
        self.fixed = fixed;
        self
    }

    /// The platform's daemon cannot follow a file (E2B's envd), so the relay polls turns' logs.
    pub fn without_follow(mut self) -> Platform {
        self.no_follow = true;
        self
    }

    /// Whether the daemon follows a turn's log (hangar-envd's `Follow`) rather than the relay
    /// polling it.
    pub fn daemon_follows_files(&self) -> bool {
        !self.no_follow
    }

    /// The `docker` provider on the two test images, or `None` when the test must skip.
    pub fn docker(test: &str) -> Option<Platform> {
        docker::available(test).then(|| {
            Platform::new(
                "docker",
                "docker",
                json!({"image": ENVD_IMAGE}),
                Some(json!({"image": PLAIN_IMAGE})),
                Vec::new(),
                None,
            )
        })
    }

    /// The `kubernetes` provider against the API server double (`crate::kube`), its pods run as
    /// containers of the two test images, the daemon reached by `reach` (`pod-ip` or
    /// `port-forward`); `None` when the test must skip.
    pub fn kubernetes(test: &str, reach: &str) -> Option<Platform> {
        if !docker::available(test) {
            return None;
        }
        let api = std::thread::scope(|s| {
            s.spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime")
                    .block_on(crate::kube::ApiServer::start())
            })
            .join()
            .expect("starting the API server double")
        });
        let dir = std::env::temp_dir().join(format!("hangar-kube-{}-{}", std::process::id(), api.addr.port()));
        let kubeconfig = api.kubeconfig(&dir, "sandboxes");
        let env = vec![
            ("HANGAR_KUBERNETES_KUBECONFIG".to_string(), kubeconfig.to_string_lossy().into_owned()),
            ("HANGAR_KUBERNETES_REACH".to_string(), reach.to_string()),
            ("HANGAR_KUBERNETES_START_SECONDS".to_string(), "30".to_string()),
        ];
        Some(Platform::new(
            if reach == "pod-ip" { "kubernetes (pod IP)" } else { "kubernetes (port-forward)" },
            "kubernetes",
            json!({"image": ENVD_IMAGE}),
            Some(json!({"image": PLAIN_IMAGE, "daemon": false})),
            env,
            Some(Box::new(api)),
        ))
    }

    /// The kinds of sandbox the platform has: with a daemon, and without one where it can.
    pub fn daemons(&self) -> Vec<Daemon> {
        let mut d = vec![Daemon::With];
        if self.without_daemon.is_some() {
            d.push(Daemon::Without);
        }
        d
    }

    /// The options of a sandbox of kind `daemon`, with `extra`'s fields added.
    pub fn options(&self, daemon: Daemon, extra: Value) -> Value {
        let base = match daemon {
            Daemon::With => &self.with_daemon,
            Daemon::Without => {
                self.without_daemon.as_ref().unwrap_or_else(|| panic!("{} has no sandbox without a daemon", self.name))
            }
        };
        let mut options = base.clone();
        if let (Some(o), Value::Object(extra)) = (options.as_object_mut(), extra) {
            o.extend(extra.into_iter().filter(|(k, v)| self.fixed.get(k) != Some(v)));
        }
        options
    }

    /// A relay on `state` that can reach the platform, with `env` added.
    pub fn relay(&self, state: &StateDir, env: &[(&str, &str)]) -> Relay {
        let mut all: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        all.extend_from_slice(env);
        Relay::start(&state.0, &all)
    }

    /// Creates a sandbox of kind `daemon` named by `containers` after `what`, with `extra`
    /// options, as the admin; its JSON. Fails the test unless it is created (201).
    pub async fn sandbox(
        &self,
        relay: &Relay,
        containers: &mut Containers,
        what: &str,
        daemon: Daemon,
        extra: Value,
    ) -> Value {
        let name = containers.name(what);
        let body = json!({"name": name, "provider": self.provider, "options": self.options(daemon, extra)});
        let r = relay.call("POST", "/api/sandboxes", Some(ADMIN), Some(body)).await;
        assert_eq!(r.status, 201, "{}: creating {name}: {r:?}", self.name);
        r.json()
    }
}

/// One `#[tokio::test]` per case, each on a fresh platform from `$platform(test name)` (a
/// `fn(&str) -> Option<Platform>`; `None` returns at once, as a skip).
#[macro_export]
macro_rules! platform_cases {
    ($platform:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let Some(platform) = $platform(stringify!($case)) else { return };
                $crate::cases::$case(&platform).await;
            }
        )+
    };
}
