//! Units built from the fleet's memory: one per sandbox the caller sees, with its job, session,
//! role and ask (from the open inbox items on it), and its live picture; the counts, owners and
//! slots over them.
use std::collections::{HashMap, HashSet};

use serde::Serialize;
use serde_json::{json, Value};

use hangar_agents::live::{self, LiveState, Span, Stage, BUCKETS};

use super::{estimate::Estimate, Filter, Job, Ses, State, NO_OWNER};
use crate::{
    auth::Caller,
    inbox::InboxView,
    store::{ItemKind, ItemRow, JobState, SandboxState, TurnState},
};

/// The fields of a unit that hold an agent's own text (untrusted; the inbox's items say theirs
/// in `inbox.agent_text`).
pub const AGENT_TEXT: &[&str] =
    &["units.now", "units.reason.text", "units.question", "units.question_options", "units.model", "units.pr.url"];

/// The six statuses, most urgent first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Approval,
    Failed,
    Denied,
    Running,
    Queued,
    Off,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Approval => "approval",
            Role::Failed => "failed",
            Role::Denied => "denied",
            Role::Running => "running",
            Role::Queued => "queued",
            Role::Off => "off",
        }
    }
}

/// Units by role, every role named.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub approval: usize,
    pub failed: usize,
    pub denied: usize,
    pub running: usize,
    pub queued: usize,
    pub off: usize,
}

impl Counts {
    fn add(&mut self, r: Role) {
        let n = match r {
            Role::Approval => &mut self.approval,
            Role::Failed => &mut self.failed,
            Role::Denied => &mut self.denied,
            Role::Running => &mut self.running,
            Role::Queued => &mut self.queued,
            Role::Off => &mut self.off,
        };
        *n += 1;
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Owner {
    /// A person's id, or `none`.
    pub id: String,
    pub name: Option<String>,
    pub count: usize,
}

/// Running turns against the sum of the credentials' concurrency limits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Slots {
    pub used: usize,
    pub max: usize,
}

/// What the stream's `summary` event carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub counts: Counts,
    pub owners: Vec<Owner>,
    pub slots: Slots,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionRef {
    pub id: String,
    pub name: String,
    pub state: TurnState,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Why {
    pub title: String,
    pub text: Option<String>,
}

/// One sandbox as the fleet shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unit {
    pub id: String,
    pub tail: String,
    /// The name a person reads (`HGR-8AA3`): the id's tail, lengthened where two sandboxes the
    /// relay knows would share it (`refs::short_names`); every route takes it as a reference.
    pub short: String,
    pub name: String,
    pub environment: Option<String>,
    pub provider: String,
    pub state: SandboxState,
    pub kind: &'static str,
    pub job: Option<String>,
    pub job_state: Option<JobState>,
    pub session: Option<SessionRef>,
    pub owner: Option<String>,
    pub actor: Option<String>,
    pub harness: Option<String>,
    pub model: Option<String>,
    pub repo: Option<String>,
    pub branch: Option<String>,
    pub role: Role,
    pub label: &'static str,
    pub reason: Option<Why>,
    pub ask: Option<Value>,
    pub ask_expires_at: Option<f64>,
    pub inbox: Vec<String>,
    pub work: Option<String>,
    pub task: Option<String>,
    pub question: Option<String>,
    pub question_options: Vec<String>,
    pub now: Option<String>,
    pub last_activity_at: Option<f64>,
    pub stage: Option<Stage>,
    pub stage_pct: Option<u8>,
    pub stage_estimate: Option<Estimate>,
    pub stages: Vec<Span>,
    pub files_changed: Option<u64>,
    pub commits: Option<u64>,
    pub usage: Option<Value>,
    pub tokens_1h: [u64; BUCKETS],
    pub pr: Option<Value>,
    pub created_at: f64,
    /// When the work shown started: the latest turn's start, else the job's creation.
    pub started_at: Option<f64>,
    /// When it ended: the latest turn's end while no job of it is live; `null` while live.
    pub ended_at: Option<f64>,
    pub expires_at: Option<f64>,
    pub turn: Option<i64>,
    pub live: bool,
    /// Nothing in it runs or waits on anyone, and its work ended (or its sandbox is paused).
    #[serde(skip)]
    pub settled: bool,
}

/// `GET /api/fleet`.
#[derive(Debug, Clone, Serialize)]
pub struct FleetView {
    pub at: f64,
    pub person: String,
    pub counts: Counts,
    pub owners: Vec<Owner>,
    pub slots: Slots,
    pub inbox: InboxView,
    pub units: Vec<Unit>,
    pub agent_text: &'static [&'static str],
}

impl FleetView {
    pub(super) fn new(at: f64, caller: &Caller, p: Picture, inbox: InboxView) -> FleetView {
        FleetView {
            at,
            person: caller.person.clone(),
            counts: p.summary.counts,
            owners: p.summary.owners,
            slots: p.summary.slots,
            inbox,
            units: p.units,
            agent_text: AGENT_TEXT,
        }
    }
}

/// The units a caller sees through a filter, and their summary.
pub(super) struct Picture {
    pub units: Vec<Unit>,
    pub summary: Summary,
}

/// The sandbox an inbox item is about: its own, or its session's or job's.
pub(super) fn sandbox_of(st: &State, i: &ItemRow) -> Option<String> {
    i.sandbox_id
        .clone()
        .or_else(|| i.session_id.as_ref().and_then(|s| st.sessions.get(s)).map(|s| s.sandbox_id.clone()))
        .or_else(|| i.job_id.as_ref().and_then(|j| st.jobs.get(j)).and_then(|j| j.sandbox_id.clone()))
}

fn slots(st: &State, max_runs: usize) -> Slots {
    // "The credentials" are the distinct credentials of the sessions the fleet knows, each
    // allowing `max_runs` turns at once; a turn without a credential is held to no limit, so
    // it is its own slot, used.
    let mut credentials = HashSet::new();
    let (mut used, mut unlimited) = (0, 0);
    for s in st.sessions.values() {
        if let Some(c) = &s.credential {
            credentials.insert(c.as_str());
        }
        if let Some(t) = s.turn.as_ref().filter(|t| !t.state.is_terminal() && t.state != TurnState::Queued) {
            used += 1;
            if t.credential.is_none() {
                unlimited += 1;
            }
        }
    }
    Slots { used, max: credentials.len() * max_runs + unlimited }
}

fn first_line(text: &str, n: usize) -> Option<String> {
    text.lines().map(str::trim).find(|l| !l.is_empty()).map(|l| live::cut(l, n))
}

fn item_tool(i: &ItemRow) -> String {
    i.tool
        .as_ref()
        .and_then(|t| t.get("name"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| i.title.split(':').next().unwrap_or("a tool call").trim().to_string())
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().chain(c).collect::<String>()).unwrap_or_default().replace('_', " ")
}

struct Ctx<'a> {
    st: &'a State,
    caller: &'a Caller,
    now: f64,
    shorts: HashMap<&'a str, String>,
}

impl Ctx<'_> {
    fn mine(&self, person: &str) -> bool {
        self.caller.sees().is_none_or(|p| p == person)
    }
}

fn live_turn(s: &Ses) -> bool {
    s.turn.as_ref().is_some_and(|t| !t.state.is_terminal())
}

fn last_at(s: &Ses) -> f64 {
    s.turn.as_ref().map_or(s.created_at, |t| t.created_at)
}

/// One sandbox's unit, `None` when the caller has nothing in it.
fn unit(cx: &Ctx<'_>, sbx: &super::Sbx, sessions: &[&Ses], jobs: &[&Job], items: &[&ItemRow]) -> Option<Unit> {
    // A person sees the sandboxes they own and those they started work in; an admin all.
    let owned = sbx.owner.as_deref().is_some_and(|o| cx.mine(o));
    if cx.caller.sees().is_some() && !owned && sessions.is_empty() && jobs.is_empty() {
        return None;
    }
    let asks = |s: &Ses| items.iter().any(|i| i.kind.asks() && i.session_id.as_deref() == Some(&s.id));
    let chosen = sessions
        .iter()
        .copied()
        .max_by(|a, b| (asks(a), live_turn(a)).cmp(&(asks(b), live_turn(b))).then(last_at(a).total_cmp(&last_at(b))));
    let live_job =
        jobs.iter().copied().filter(|j| !j.state.is_terminal()).max_by(|a, b| a.created_at.total_cmp(&b.created_at));
    let (job, session) = match live_job {
        Some(j) => (Some(j), j.session_id.as_ref().and_then(|s| cx.st.sessions.get(s)).or(chosen)),
        None => {
            let job = match chosen {
                Some(s) => jobs.iter().copied().find(|j| j.session_id.as_deref() == Some(&s.id)),
                None => jobs.iter().copied().max_by(|a, b| a.created_at.total_cmp(&b.created_at)),
            };
            (job, chosen)
        }
    };
    let turn = session.and_then(|s| s.turn.as_ref());
    let picture: Option<&LiveState> = session.and_then(|s| cx.st.live.get(&s.id));
    // Per-turn fields only when the picture is of the turn shown (a restart starts with none).
    let this_turn = picture.filter(|l| turn.is_some_and(|t| t.id == l.turn_id));

    // The inbox items that concern what is shown: its session's (the latest turn's, for a
    // failure), its job's.
    let on_work = |i: &&&ItemRow| {
        let by_job = job.is_some_and(|j| i.job_id.as_deref() == Some(&j.id));
        let by_session = session.is_some_and(|s| i.session_id.as_deref() == Some(&s.id));
        let this = i.turn_id.is_none() || turn.is_some_and(|t| i.turn_id.as_deref() == Some(&t.id));
        by_job || (by_session && (i.kind.asks() || this)) || (i.session_id.is_none() && i.job_id.is_none())
    };
    let of_kind = |k: ItemKind| items.iter().filter(on_work).find(|i| i.kind == k).copied();
    let job_live = job.is_some_and(|j| !j.state.is_terminal());
    let turn_live = turn.is_some_and(|t| !t.state.is_terminal());
    let live = job_live || turn_live;

    let mut ask = None;
    let mut ask_expires_at = None;
    let mut question = None;
    let mut question_options = Vec::new();
    let mut now_over = None;
    let (role, label, reason) = if let Some(i) = of_kind(ItemKind::Approval) {
        ask = Some(json!({"kind": "tool", "approval": i.ask_id, "job": job.map(|j| &j.id), "session": i.session_id}));
        ask_expires_at = i.expires_at;
        now_over = Some(format!("waiting on you: {}", live::cut(&item_tool(i), live::COMMAND_CHARS)));
        (Role::Approval, "Needs approval", Some(Why { title: "Held".into(), text: Some(i.title.clone()) }))
    } else if let Some(i) = of_kind(ItemKind::Question) {
        ask =
            Some(json!({"kind": "question", "question": i.ask_id, "job": job.map(|j| &j.id), "session": i.session_id}));
        ask_expires_at = i.expires_at;
        question = Some(i.text.clone());
        question_options = i.options.clone();
        now_over = Some("waiting on you: a question".to_string());
        (Role::Approval, "Has a question", Some(Why { title: "Question".into(), text: Some(i.text.clone()) }))
    } else if let Some(i) = of_kind(ItemKind::Failed) {
        ask = Some(json!({"kind": "inbox", "item": i.id}));
        (
            Role::Failed,
            "Failed",
            Some(Why { title: i.title.clone(), text: Some(i.text.clone()).filter(|t| !t.is_empty()) }),
        )
    } else if let Some(i) = of_kind(ItemKind::Denied) {
        ask = Some(json!({"kind": "inbox", "item": i.id}));
        (
            Role::Denied,
            "Denied",
            Some(Why { title: i.title.clone(), text: Some(i.text.clone()).filter(|t| !t.is_empty()) }),
        )
    } else if let Some(t) = turn.filter(|t| t.state == TurnState::Queued) {
        let title = match t.reason.as_deref() {
            Some("credential_concurrency") => "Waiting for a slot",
            Some("plan_limit") => "Waiting for the plan window",
            Some("sandbox_not_ready") => "Waiting for the sandbox",
            _ => "Queued",
        };
        (Role::Queued, "Queued", Some(Why { title: title.into(), text: t.detail.clone() }))
    } else if job.is_some_and(|j| j.state == JobState::Queued) {
        let why = Why { title: "Starting".into(), text: Some("hangar prepares the job's sandbox and session".into()) };
        (Role::Queued, "Queued", Some(why))
    } else if live {
        (Role::Running, "Running", None)
    } else {
        let why = if sbx.state == SandboxState::Paused {
            Some(Why { title: "Paused".into(), text: None })
        } else if sbx.state == SandboxState::Gone {
            let text = "what it ran on vanished outside hangar; destroy it".to_string();
            Some(Why { title: "Gone".into(), text: Some(text) })
        } else if let Some(j) = job {
            Some(Why { title: capitalised(j.state.as_str()), text: j.reason.clone() })
        } else {
            turn.map(|t| Why { title: capitalised(t.state.as_str()), text: t.reason.clone() })
        };
        (Role::Off, "Off", why)
    };

    let harness = session.map(|s| s.harness.clone()).or_else(|| job.map(|j| j.harness.clone()));
    let span = this_turn.and_then(LiveState::stage).filter(|_| live);
    let stage = span.map(|s| s.stage);
    let stage_pct = this_turn.and_then(|l| l.stage_pct).filter(|_| stage.is_some());
    let stage_estimate = match (span, stage_pct, &harness) {
        (Some(s), None, Some(h)) => Some(cx.st.estimates.estimate(h, s.stage, cx.now - s.started_at)),
        _ => None,
    };
    let mut tokens_1h = [0u64; BUCKETS];
    for s in sessions {
        if let Some(l) = cx.st.live.get(&s.id) {
            l.buckets.add_to(&mut tokens_1h, cx.now);
        }
    }
    let prompt = job.map(|j| j.prompt.as_str()).or_else(|| turn.map(|t| t.prompt.as_str())).unwrap_or_default();
    let now = now_over.or_else(|| this_turn.and_then(|l| l.now.clone()));
    let settled = role == Role::Off && (sbx.state != SandboxState::Running || job.is_some() || turn.is_some());
    Some(Unit {
        id: sbx.id.clone(),
        tail: sbx.id.chars().rev().take(4).collect::<Vec<_>>().into_iter().rev().collect(),
        short: cx.shorts.get(sbx.id.as_str()).cloned().unwrap_or_default(),
        name: sbx.name.clone(),
        environment: None,
        provider: sbx.provider.clone(),
        state: sbx.state,
        kind: if job.is_some() {
            "job"
        } else if !sessions.is_empty() {
            "session"
        } else {
            "sandbox"
        },
        job: job.map(|j| j.id.clone()),
        job_state: job.map(|j| j.state),
        session: session.map(|s| SessionRef {
            id: s.id.clone(),
            name: s.name.clone(),
            state: s.turn.as_ref().map_or(TurnState::Queued, |t| t.state),
        }),
        owner: sbx.owner.clone(),
        actor: job.map(|j| format!("{}:{}", j.scope.as_str(), j.person)),
        harness,
        model: picture.and_then(|l| l.model.clone()),
        repo: None,
        branch: job.and_then(|j| j.branch.clone()),
        role,
        label,
        reason,
        ask,
        ask_expires_at,
        inbox: items.iter().filter(|i| cx.mine(&i.person)).map(|i| i.id.clone()).collect(),
        work: first_line(prompt, 80),
        task: Some(prompt.to_string()).filter(|p| !p.is_empty()),
        question,
        question_options,
        last_activity_at: this_turn.and_then(|l| l.last_activity_at),
        now,
        stage,
        stage_pct,
        stage_estimate,
        stages: this_turn.map(|l| l.stages.iter().cloned().collect()).unwrap_or_default(),
        files_changed: this_turn.map(LiveState::files_changed),
        commits: job.and_then(|j| j.commits_ahead).or(this_turn.map(|l| l.commits)),
        usage: this_turn.and_then(|l| l.usage.clone()),
        tokens_1h,
        pr: job.and_then(|j| j.pr_url.as_ref()).map(|u| json!({"url": u, "source": "agent_reported"})),
        created_at: sbx.created_at as f64,
        started_at: turn.and_then(|t| t.started_at).or(job.map(|j| j.created_at)),
        ended_at: turn.and_then(|t| t.finished_at).filter(|_| !live),
        expires_at: turn
            .filter(|t| !t.state.is_terminal())
            .and_then(|t| t.started_at.map(|s| s + t.timeout_minutes as f64 * 60.0)),
        turn: turn.map(|t| t.n),
        live,
        settled,
    })
}

/// The caller's units through `filter`, most urgent first, with the counts, owners and slots.
pub(super) fn picture(
    st: &State,
    items: &[ItemRow],
    caller: &Caller,
    filter: &Filter,
    now: f64,
    max_runs: usize,
) -> Picture {
    // Unique among every sandbox the relay knows, so a unit's name is the same for everyone.
    let shorts = crate::refs::short_names(st.sandboxes.keys().map(String::as_str));
    let cx = Ctx { st, caller, now, shorts };
    let mut sessions: HashMap<&str, Vec<&Ses>> = HashMap::new();
    for s in st.sessions.values().filter(|s| cx.mine(&s.person)) {
        sessions.entry(s.sandbox_id.as_str()).or_default().push(s);
    }
    let mut jobs: HashMap<&str, Vec<&Job>> = HashMap::new();
    for j in st.jobs.values().filter(|j| cx.mine(&j.person)) {
        if let Some(s) = &j.sandbox_id {
            jobs.entry(s.as_str()).or_default().push(j);
        }
    }
    let mut on: HashMap<String, Vec<&ItemRow>> = HashMap::new();
    for i in items {
        if let Some(s) = sandbox_of(st, i) {
            on.entry(s).or_default().push(i);
        }
    }
    let mut units: Vec<Unit> = st
        .sandboxes
        .values()
        .filter_map(|sbx| {
            let id = sbx.id.as_str();
            let none = Vec::new();
            unit(
                &cx,
                sbx,
                sessions.get(id).unwrap_or(&Vec::new()),
                jobs.get(id).unwrap_or(&Vec::new()),
                on.get(id).unwrap_or(&none),
            )
        })
        .filter(|u| filter.include_stopped || !u.settled)
        .collect();

    let mut owners: HashMap<Option<String>, usize> = HashMap::new();
    for u in &units {
        *owners.entry(u.owner.clone()).or_default() += 1;
    }
    let mut owners: Vec<Owner> = owners
        .into_iter()
        .map(|(id, count)| Owner {
            name: id.as_ref().map(|p| st.persons.get(p).cloned().unwrap_or_else(|| p.clone())),
            id: id.unwrap_or_else(|| NO_OWNER.to_string()),
            count,
        })
        .collect();
    // The most units first; nobody's last.
    owners.sort_by(|a, b| (a.name.is_none(), b.count, &a.id).cmp(&(b.name.is_none(), a.count, &b.id)));

    if let Some(o) = &filter.owner {
        units.retain(|u| u.owner.as_deref().unwrap_or(NO_OWNER) == o);
    }
    units.sort_by(|a, b| (a.role, &a.name).cmp(&(b.role, &b.name)));
    let mut counts = Counts::default();
    for u in &units {
        counts.add(u.role);
    }
    Picture { units, summary: Summary { counts, owners, slots: slots(st, max_runs) } }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        fleet::{Sbx, Turn},
        store::{ItemState, Scope},
    };

    fn caller(person: &str, scope: Scope) -> Caller {
        Caller { token_id: format!("tok_{person}"), name: person.into(), scope, person: person.into() }
    }

    fn sbx(st: &mut State, id: &str, owner: Option<&str>) {
        let s = Sbx {
            id: id.into(),
            name: id.into(),
            provider: "local".into(),
            state: SandboxState::Running,
            owner: owner.map(str::to_string),
            created_at: 1,
        };
        st.sandboxes.insert(id.into(), s);
    }

    fn ses(st: &mut State, id: &str, sandbox: &str, person: &str, turn: TurnState, credential: Option<&str>) {
        let t = Turn {
            id: format!("turn_{id}"),
            n: 1,
            state: turn,
            reason: (turn == TurnState::Queued).then(|| "credential_concurrency".to_string()),
            detail: None,
            credential: credential.map(str::to_string),
            prompt: "do it".into(),
            created_at: 10.0,
            started_at: Some(11.0),
            finished_at: turn.is_terminal().then_some(12.0),
            timeout_minutes: 60,
        };
        let s = Ses {
            id: id.into(),
            name: id.into(),
            person: person.into(),
            sandbox_id: sandbox.into(),
            harness: "claude-code".into(),
            credential: credential.map(str::to_string),
            created_at: 10.0,
            turn: Some(t),
        };
        st.sessions.insert(id.into(), s);
    }

    fn item(id: &str, kind: ItemKind, person: &str, session: &str, turn: Option<&str>) -> ItemRow {
        ItemRow {
            id: id.into(),
            kind,
            state: ItemState::Open,
            person: person.into(),
            ask_id: kind.asks().then(|| format!("apr_{id}")),
            request: None,
            session_id: Some(session.into()),
            session_name: Some(session.into()),
            turn_id: turn.map(str::to_string),
            job_id: None,
            sandbox_id: None,
            sandbox_name: None,
            title: "Bash: git push origin main".into(),
            text: "why".into(),
            options: vec![],
            tool: Some(serde_json::json!({"name": "Bash"})),
            call: None,
            created_at: 1.0,
            expires_at: Some(99.0),
            ended_at: None,
            ended_by: None,
            outcome: None,
        }
    }

    fn role_of(p: &Picture, id: &str) -> Option<Role> {
        p.units.iter().find(|u| u.id == id).map(|u| u.role)
    }

    #[test]
    fn roles_come_from_the_inbox_first_then_the_work() {
        let mut st = State::default();
        for id in ["a", "b", "c", "d"] {
            sbx(&mut st, id, Some("p"));
        }
        ses(&mut st, "sa", "a", "p", TurnState::Running, None);
        ses(&mut st, "sb", "b", "p", TurnState::Running, None);
        ses(&mut st, "sc", "c", "p", TurnState::Queued, Some("k"));
        ses(&mut st, "sd", "d", "p", TurnState::Succeeded, None);
        let items = vec![
            item("i1", ItemKind::Failed, "p", "sa", Some("turn_sa")),
            item("i2", ItemKind::Approval, "p", "sa", Some("turn_sa")),
            // A failure of an earlier turn is not this one's.
            item("i3", ItemKind::Failed, "p", "sb", Some("turn_old")),
        ];
        let p = picture(&st, &items, &caller("p", Scope::User), &Filter::default(), 20.0, 2);
        assert_eq!(role_of(&p, "a"), Some(Role::Approval));
        let a = p.units.iter().find(|u| u.id == "a").unwrap();
        assert_eq!(
            a.ask,
            Some(serde_json::json!({"kind": "tool", "approval": "apr_i2", "job": null, "session": "sa"}))
        );
        assert_eq!((a.now.as_deref(), a.ask_expires_at), (Some("waiting on you: Bash"), Some(99.0)));
        assert_eq!(a.inbox, ["i1", "i2"]);
        assert_eq!(role_of(&p, "b"), Some(Role::Running));
        assert_eq!(role_of(&p, "c"), Some(Role::Queued));
        assert_eq!(role_of(&p, "d"), None, "settled: shown only with include_stopped");
        let all = Filter { include_stopped: true, ..Filter::default() };
        let p = picture(&st, &items, &caller("p", Scope::User), &all, 20.0, 2);
        assert_eq!(role_of(&p, "d"), Some(Role::Off));
        assert_eq!(
            p.units.iter().map(|u| u.role).collect::<Vec<_>>(),
            [Role::Approval, Role::Running, Role::Queued, Role::Off]
        );
        assert_eq!(p.summary.counts, Counts { approval: 1, running: 1, queued: 1, off: 1, ..Counts::default() });
    }

    #[test]
    fn a_person_sees_their_own_and_an_admin_everyone_s() {
        let mut st = State::default();
        sbx(&mut st, "default", None);
        sbx(&mut st, "mine", Some("p"));
        sbx(&mut st, "theirs", Some("q"));
        ses(&mut st, "s1", "default", "p", TurnState::Running, None);
        ses(&mut st, "s2", "default", "q", TurnState::Running, None);
        ses(&mut st, "s3", "theirs", "q", TurnState::Running, None);
        st.persons.insert("p".into(), "Pat".into());
        let p = picture(&st, &[], &caller("p", Scope::User), &Filter::default(), 20.0, 2);
        let mut ids: Vec<&str> = p.units.iter().map(|u| u.id.as_str()).collect();
        ids.sort();
        assert_eq!(ids, ["default", "mine"]);
        let d = p.units.iter().find(|u| u.id == "default").unwrap();
        assert_eq!(d.session.as_ref().map(|s| s.id.as_str()), Some("s1"), "their own session, not another's");
        assert_eq!(p.summary.owners[0], Owner { id: "p".into(), name: Some("Pat".into()), count: 1 });
        assert_eq!(p.summary.owners[1], Owner { id: "none".into(), name: None, count: 1 });

        let admin = picture(&st, &[], &caller("root", Scope::Admin), &Filter::default(), 20.0, 2);
        assert_eq!(admin.units.len(), 3);
        let only = Filter { owner: Some("none".into()), include_stopped: false };
        let p = picture(&st, &[], &caller("root", Scope::Admin), &only, 20.0, 2);
        assert_eq!(p.units.iter().map(|u| u.id.as_str()).collect::<Vec<_>>(), ["default"]);
        assert_eq!(p.summary.owners.len(), 3, "owners are counted before the owner filter");
    }

    #[test]
    fn slots_are_running_turns_against_the_credentials_limits() {
        let mut st = State::default();
        sbx(&mut st, "x", None);
        ses(&mut st, "a", "x", "p", TurnState::Running, Some("K"));
        ses(&mut st, "b", "x", "p", TurnState::Queued, Some("K"));
        ses(&mut st, "c", "x", "p", TurnState::WaitingInput, None);
        ses(&mut st, "d", "x", "p", TurnState::Failed, Some("L"));
        // K and L allow 3 each; the turn without a credential is a slot of its own.
        assert_eq!(slots(&st, 3), Slots { used: 2, max: 7 });
    }
}
