//! Plain HTTP routes: `/health`, `/init`, `/envs`, `/metrics`.

use hangar_e2e::*;
use serde_json::json;

#[tokio::test]
async fn health_is_204() {
    let envd = Envd::start(&[]);
    let r = envd.http("GET", "/health", &[], "").await;
    assert_eq!(r.status, 204, "{r:?}");
    assert!(r.body.is_empty());
    let r = envd.h2("GET", "/health", &[], "").await;
    assert_eq!(r.status, 204, "/health over h2c: {r:?}");
}

#[tokio::test]
async fn init_is_204_with_version() {
    let envd = Envd::start(&[]);
    let r = envd
        .http(
            "POST",
            "/init",
            &[("content-type", "application/json")],
            json!({"envVars": {}, "timestamp": "2025-01-01T00:00:00.000Z", "hyperloopIP": "1.2.3.4"}).to_string(),
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    let v = r.header("x-envd-version").unwrap_or_else(|| panic!("no X-Envd-Version header: {r:?}"));
    let parts: Vec<u32> = v.split('.').map(|p| p.parse().unwrap_or_else(|_| panic!("version {v:?}"))).collect();
    assert!(parts.len() == 3 && (parts[0], parts[1], parts[2]) >= (0, 6, 4), "X-Envd-Version {v:?} must be >= 0.6.4");
    // an empty body is accepted too
    let r = envd.http("POST", "/init", &[], "").await;
    assert!(r.status == 204, "empty /init body: {r:?}");
}

#[tokio::test]
async fn envs_empty_by_default() {
    let envd = Envd::start(&[]);
    let r = envd.http("GET", "/envs", &[], "").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json(), json!({}));
}

#[tokio::test]
async fn metrics_has_the_keys() {
    let envd = Envd::start(&[]);
    let r = envd.http("GET", "/metrics", &[], "").await;
    assert_eq!(r.status, 200, "{r:?}");
    let m = r.json();
    for k in [
        "ts",
        "cpu_count",
        "cpu_used_pct",
        "mem_total",
        "mem_used",
        "mem_cache",
        "mem_total_mib",
        "mem_used_mib",
        "disk_used",
        "disk_total",
    ] {
        assert!(m.get(k).is_some_and(|v| v.is_number()), "metric {k} missing or not a number: {m}");
    }
    assert!(m["cpu_count"].as_u64().unwrap_or(0) >= 1, "{m}");
    let total = m["mem_total"].as_f64().unwrap();
    let used = m["mem_used"].as_f64().unwrap();
    assert!(total > 0.0 && used > 0.0 && used <= total, "{m}");
    let total_mib = m["mem_total_mib"].as_f64().unwrap();
    assert!((total / 1048576.0 - total_mib).abs() <= 1.0, "mem_total_mib vs mem_total: {m}");
    assert!(m["disk_total"].as_f64().unwrap() > 0.0, "{m}");
    let pct = m["cpu_used_pct"].as_f64().unwrap();
    assert!((0.0..=100.0).contains(&pct), "{m}");
    let ts = m["ts"].as_f64().unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!((ts - now).abs() < 60.0, "ts {ts} is Unix seconds near now {now}");
}
