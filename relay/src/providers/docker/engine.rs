//! What the Docker Engine answers, in the provider's terms: its errors as `ProviderError`s, and
//! what the provider reads from an inspection (a container's IP, state and environment, an image's
//! daemon label) or from an archive (its first file).
use std::collections::HashMap;

use bollard::{
    errors::Error as DockerError,
    models::{ContainerInspectResponse, ContainerStateStatusEnum},
};

use super::{container_name, ENGINE_TIMEOUT, LABEL_ENVD};
use crate::{providers::ProviderError, store::SandboxRow};

/// What Docker answered, for an error message.
pub(super) fn answer(e: &DockerError) -> String {
    match e {
        DockerError::DockerResponseServerError { message, .. } => message.trim().to_string(),
        e => e.to_string(),
    }
}

pub(super) fn status(e: &DockerError) -> Option<u16> {
    match e {
        DockerError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// An Engine error in the provider's terms: Docker not answering is `Unreachable`, an error it
/// answered with is `Engine`.
pub(super) fn engine(context: &str, e: DockerError) -> ProviderError {
    match e {
        DockerError::DockerResponseServerError { status_code, message } => {
            ProviderError::Engine(format!("{context}: Docker answered {status_code}: {}", message.trim()))
        }
        DockerError::SocketNotFoundError(path) => {
            ProviderError::Unreachable(format!("{context}: Docker is not reachable: no socket at {path} (DOCKER_HOST)"))
        }
        DockerError::RequestTimeoutError => ProviderError::Unreachable(format!(
            "{context}: Docker is not reachable: no answer within {ENGINE_TIMEOUT:?}"
        )),
        e @ (DockerError::IOError { .. }
        | DockerError::HyperResponseError { .. }
        | DockerError::HyperLegacyError { .. }
        | DockerError::HttpClientError { .. }) => {
            ProviderError::Unreachable(format!("{context}: Docker is not reachable: {e}"))
        }
        e => ProviderError::Engine(format!("{context}: {e}")),
    }
}

pub(super) fn gone(sandbox: &SandboxRow) -> ProviderError {
    ProviderError::Gone(format!(
        "sandbox {:?}: its container {} is gone (removed outside hangar); destroy the sandbox",
        sandbox.name,
        container_name(sandbox)
    ))
}

/// The container's IP address: on the network it was created on (its `NetworkMode`: the
/// `network` option, or `bridge`), else on the default bridge, else on any other network in a
/// stable order (one connected to it later).
pub(super) fn container_ip(info: &ContainerInspectResponse) -> Option<String> {
    let networks = info.network_settings.as_ref()?.networks.as_ref()?;
    let own = info.host_config.as_ref().and_then(|h| h.network_mode.as_deref()).unwrap_or("bridge");
    // `default` is Docker's other name for the default bridge.
    let own = if own == "default" { "bridge" } else { own };
    let mut found: Vec<(&String, &String)> = networks
        .iter()
        .filter_map(|(name, endpoint)| endpoint.ip_address.as_ref().filter(|ip| !ip.is_empty()).map(|ip| (name, ip)))
        .collect();
    found.sort_by_key(|(name, _)| (name.as_str() != own, name.as_str() != "bridge", name.as_str()));
    found.first().map(|(_, ip)| ip.to_string())
}

pub(super) fn env_of<'a>(env: &'a [String], key: &str) -> Option<&'a str> {
    env.iter().rev().find_map(|kv| kv.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

pub(super) fn has_daemon(labels: Option<&HashMap<String, String>>) -> bool {
    labels.and_then(|l| l.get(LABEL_ENVD)).is_some_and(|v| v == "true")
}

pub(super) fn state_of(info: &ContainerInspectResponse) -> Option<ContainerStateStatusEnum> {
    info.state.as_ref().and_then(|s| s.status)
}

/// The content of the first entry of a tar archive (the Engine's archive of one path), when it
/// is a regular file.
pub(super) fn first_file(tar: &[u8]) -> Option<&[u8]> {
    let header = tar.get(..512)?;
    if !matches!(header.get(156), Some(b'0' | 0)) {
        return None;
    }
    let size = std::str::from_utf8(header.get(124..136)?).ok()?.trim_matches(|c: char| c == '\0' || c == ' ');
    let size = usize::from_str_radix(size, 8).ok()?;
    tar.get(512..512usize.checked_add(size)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_file_of_a_tar() {
        let mut tar = vec![0u8; 1024];
        tar[..6].copy_from_slice(b"passwd");
        tar[124..136].copy_from_slice(b"00000000005\0");
        tar[156] = b'0';
        tar[512..517].copy_from_slice(b"root:");
        assert_eq!(first_file(&tar), Some(&b"root:"[..]));
        tar[156] = b'2';
        assert_eq!(first_file(&tar), None, "a symlink is not read");
        tar[156] = b'0';
        tar[124..136].copy_from_slice(b"77777777777\0");
        assert_eq!(first_file(&tar), None, "a size past the end");
        assert_eq!(first_file(&tar[..100]), None);
    }

    #[test]
    fn the_address_is_on_the_containers_own_network_first() {
        use bollard::models::{EndpointSettings, HostConfig, NetworkSettings};
        let info = |mode: Option<&str>, nets: &[(&str, &str)]| ContainerInspectResponse {
            host_config: Some(HostConfig { network_mode: mode.map(str::to_string), ..Default::default() }),
            network_settings: Some(NetworkSettings {
                networks: Some(
                    nets.iter()
                        .map(|(n, ip)| {
                            (n.to_string(), EndpointSettings { ip_address: Some(ip.to_string()), ..Default::default() })
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        let nets = [("agents", "10.0.0.2"), ("bridge", "172.17.0.2"), ("another", "10.1.0.2")];
        assert_eq!(container_ip(&info(Some("agents"), &nets)).as_deref(), Some("10.0.0.2"));
        assert_eq!(container_ip(&info(Some("bridge"), &nets)).as_deref(), Some("172.17.0.2"));
        assert_eq!(container_ip(&info(Some("default"), &nets)).as_deref(), Some("172.17.0.2"));
        assert_eq!(container_ip(&info(None, &nets)).as_deref(), Some("172.17.0.2"));
        // Its own network without an address (not yet up): the bridge, then by name.
        let some = [("agents", ""), ("zeta", "10.2.0.2"), ("another", "10.1.0.2")];
        assert_eq!(container_ip(&info(Some("agents"), &some)).as_deref(), Some("10.1.0.2"));
        assert_eq!(container_ip(&info(Some("agents"), &[])), None);
    }

    #[test]
    fn env_lookup_takes_the_last_value() {
        let env = vec!["A=1".to_string(), "AB=2".into(), "A=3".into()];
        assert_eq!(env_of(&env, "A"), Some("3"));
        assert_eq!(env_of(&env, "AB"), Some("2"));
        assert_eq!(env_of(&env, "B"), None);
    }
}
