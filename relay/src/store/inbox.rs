//! The inbox: what waits on a person (an approval, a question) and what they should know (a
//! failure, a denied call). An item is written when it opens and once more when it ends; the
//! relay keeps the open ones in memory as well (`crate::inbox`).
use rusqlite::{params, OptionalExtension, Row};
use serde::Serialize;

use super::{unknown, Durability, Result, Store};

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS inbox (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    person TEXT NOT NULL,
    ask_id TEXT UNIQUE,
    request TEXT,
    session_id TEXT,
    session_name TEXT,
    turn_id TEXT,
    job_id TEXT,
    sandbox_id TEXT,
    sandbox_name TEXT,
    title TEXT NOT NULL,
    text TEXT NOT NULL,
    options TEXT NOT NULL,
    tool TEXT,
    call TEXT,
    created_at REAL NOT NULL,
    expires_at REAL,
    ended_at REAL,
    ended_by TEXT,
    outcome TEXT,
    UNIQUE (sandbox_id, request)
);
CREATE INDEX IF NOT EXISTS inbox_state ON inbox(state);
";

/// What an item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// A tool call held until someone decides.
    Approval,
    /// The agent asked.
    Question,
    /// A turn or a job failed or crashed.
    Failed,
    /// A held call was denied (by a person, or because nobody decided in time).
    Denied,
}

impl ItemKind {
    pub const ALL: [ItemKind; 4] = [ItemKind::Approval, ItemKind::Question, ItemKind::Failed, ItemKind::Denied];

    pub fn as_str(self) -> &'static str {
        match self {
            ItemKind::Approval => "approval",
            ItemKind::Question => "question",
            ItemKind::Failed => "failed",
            ItemKind::Denied => "denied",
        }
    }

    pub fn parse(s: &str) -> Option<ItemKind> {
        ItemKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Whether it waits on a decision (rather than on an ack).
    pub fn asks(self) -> bool {
        matches!(self, ItemKind::Approval | ItemKind::Question)
    }
}

/// Where an item is in its life. Only `open` items are in the inbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ItemState {
    Open,
    Allowed,
    Denied,
    Answered,
    /// Nobody decided in time: the call was denied, the question left unanswered.
    Expired,
    Acked,
    /// Its turn ended before anyone decided.
    Withdrawn,
}

const STATES: [ItemState; 7] = [
    ItemState::Open,
    ItemState::Allowed,
    ItemState::Denied,
    ItemState::Answered,
    ItemState::Expired,
    ItemState::Acked,
    ItemState::Withdrawn,
];

impl ItemState {
    pub fn as_str(self) -> &'static str {
        match self {
            ItemState::Open => "open",
            ItemState::Allowed => "allowed",
            ItemState::Denied => "denied",
            ItemState::Answered => "answered",
            ItemState::Expired => "expired",
            ItemState::Acked => "acked",
            ItemState::Withdrawn => "withdrawn",
        }
    }

    pub fn parse(s: &str) -> Option<ItemState> {
        STATES.into_iter().find(|k| k.as_str() == s)
    }
}

/// One inbox item. Texts from a sandbox (`text`, `options`, `tool`, and `title` for approvals)
/// are the agent's, redacted, and named so in `agent_text`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ItemRow {
    pub id: String,
    pub kind: ItemKind,
    pub state: ItemState,
    pub person: String,
    /// The approval's or the question's own id (`apr_…`, `qst_…`), which its route takes.
    pub ask_id: Option<String>,
    /// The request file's id in the sandbox.
    #[serde(skip)]
    pub request: Option<String>,
    #[serde(rename = "session")]
    pub session_id: Option<String>,
    pub session_name: Option<String>,
    #[serde(rename = "turn")]
    pub turn_id: Option<String>,
    #[serde(rename = "job")]
    pub job_id: Option<String>,
    #[serde(rename = "sandbox")]
    pub sandbox_id: Option<String>,
    pub sandbox_name: Option<String>,
    pub title: String,
    pub text: String,
    pub options: Vec<String>,
    pub tool: Option<serde_json::Value>,
    /// An approval's call as the relay read it, before redaction: its `ToolCall::digest`,
    /// which an allow names so that the hook allows only that call.
    #[serde(skip)]
    pub call: Option<String>,
    pub created_at: f64,
    pub expires_at: Option<f64>,
    pub ended_at: Option<f64>,
    /// Who ended it: a person's id, or `hangar` (expiry, a turn's end).
    pub ended_by: Option<String>,
    /// The decision's reason, or the answer.
    pub outcome: Option<String>,
}

fn item_row(r: &Row<'_>) -> rusqlite::Result<ItemRow> {
    let id: String = r.get("id")?;
    let kind: String = r.get("kind")?;
    let state: String = r.get("state")?;
    let options: String = r.get("options")?;
    let tool: Option<String> = r.get("tool")?;
    Ok(ItemRow {
        kind: ItemKind::parse(&kind).ok_or_else(|| unknown("inbox", id.clone(), "kind", kind.clone()))?,
        state: ItemState::parse(&state).ok_or_else(|| unknown("inbox", id.clone(), "state", state.clone()))?,
        person: r.get("person")?,
        ask_id: r.get("ask_id")?,
        request: r.get("request")?,
        session_id: r.get("session_id")?,
        session_name: r.get("session_name")?,
        turn_id: r.get("turn_id")?,
        job_id: r.get("job_id")?,
        sandbox_id: r.get("sandbox_id")?,
        sandbox_name: r.get("sandbox_name")?,
        title: r.get("title")?,
        text: r.get("text")?,
        options: serde_json::from_str(&options).unwrap_or_default(),
        tool: tool.and_then(|t| serde_json::from_str(&t).ok()),
        call: r.get("call")?,
        created_at: r.get("created_at")?,
        expires_at: r.get("expires_at")?,
        ended_at: r.get("ended_at")?,
        ended_by: r.get("ended_by")?,
        outcome: r.get("outcome")?,
        id,
    })
}

impl Store {
    /// Records a new item; `false` when the sandbox's request was recorded already (a watch and
    /// a poll, or a restarted relay, seeing one file twice).
    pub async fn insert_item(&self, i: &ItemRow) -> Result<bool> {
        let i = i.clone();
        self.threads.write(Durability::Durable, move |conn| {
            let n = conn.execute(
                "INSERT OR IGNORE INTO inbox (id, kind, state, person, ask_id, request, session_id, session_name,
                     turn_id, job_id, sandbox_id, sandbox_name, title, text, options, tool, created_at, expires_at,
                     ended_at, ended_by, outcome, call)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)",
                params![
                    i.id,
                    i.kind.as_str(),
                    i.state.as_str(),
                    i.person,
                    i.ask_id,
                    i.request,
                    i.session_id,
                    i.session_name,
                    i.turn_id,
                    i.job_id,
                    i.sandbox_id,
                    i.sandbox_name,
                    i.title,
                    i.text,
                    serde_json::to_string(&i.options).unwrap_or_else(|_| "[]".into()),
                    i.tool.as_ref().map(|t| t.to_string()),
                    i.created_at,
                    i.expires_at,
                    i.ended_at,
                    i.ended_by,
                    i.outcome,
                    i.call,
                ],
            )?;
            Ok(n == 1)
        })
        .await
    }

    /// Ends an open item; `false` when it was not open (ended already: the first end holds).
    pub async fn end_item(&self, id: &str, state: ItemState, by: &str, outcome: Option<&str>, at: f64) -> Result<bool> {
        let id = id.to_owned();
        let by = by.to_owned();
        let outcome = outcome.map(str::to_owned);
        self.threads.write(Durability::Durable, move |conn| {
            let n = conn.execute(
                "UPDATE inbox SET state = ?2, ended_by = ?3, outcome = ?4, ended_at = ?5 WHERE id = ?1 AND state = 'open'",
                params![id, state.as_str(), by, outcome, at],
            )?;
            Ok(n == 1)
        })
        .await
    }

    /// An item by its id or its approval's or question's id.
    pub async fn item(&self, reference: &str) -> Result<Option<ItemRow>> {
        let reference = reference.to_owned();
        self.threads
            .read(move |conn| {
                Ok(conn
                    .query_row("SELECT * FROM inbox WHERE id = ?1 OR ask_id = ?1", params![&reference], item_row)
                    .optional()?)
            })
            .await
    }

    /// The items whose id or ask id a reference's pattern matches (`refs`), of `person` (every
    /// person's: `None`).
    pub async fn items_matching(&self, p: crate::refs::Pattern, person: Option<&str>) -> Result<Vec<ItemRow>> {
        let person = person.map(str::to_owned);
        self.threads
            .read(move |conn| {
                let sql = format!(
                    "SELECT * FROM inbox WHERE ({} OR {}) AND (?4 IS NULL OR person = ?4) ORDER BY created_at, id",
                    super::matching("id", "NULL"),
                    super::matching("ask_id", "NULL")
                );
                Ok(conn.query_rows(&sql, params![p.id_prefix, p.id_suffix, p.name_prefix, person], item_row)?)
            })
            .await
    }

    pub async fn open_items(&self) -> Result<Vec<ItemRow>> {
        self.threads
            .read(move |conn| {
                let mut st = conn.prepare("SELECT * FROM inbox WHERE state = 'open' ORDER BY created_at, id")?;
                let rows = st.query_map([], item_row)?.collect::<rusqlite::Result<_>>()?;
                Ok(rows)
            })
            .await
    }

    /// The item the sandbox's request `request` opened, if any.
    pub async fn item_of_request(&self, sandbox_id: &str, request: &str) -> Result<Option<ItemRow>> {
        let sandbox_id = sandbox_id.to_owned();
        let request = request.to_owned();
        self.threads
            .read(move |conn| {
                Ok(conn
                    .query_row(
                        "SELECT * FROM inbox WHERE sandbox_id = ?1 AND request = ?2",
                        params![sandbox_id, request],
                        item_row,
                    )
                    .optional()?)
            })
            .await
    }

    /// Whether the sandbox's request `request` was recorded (open or ended).
    pub async fn has_request(&self, sandbox_id: &str, request: &str) -> Result<bool> {
        let sandbox_id = sandbox_id.to_owned();
        let request = request.to_owned();
        self.threads
            .read(move |conn| {
                Ok(conn
                    .query_row(
                        "SELECT 1 FROM inbox WHERE sandbox_id = ?1 AND request = ?2",
                        params![sandbox_id, request],
                        |_| Ok(()),
                    )
                    .optional()?
                    .is_some())
            })
            .await
    }

    /// The ids of the session's open asks (approvals and questions), oldest first: what its
    /// turn waits for while it waits for input.
    pub async fn open_asks_of_session(&self, session_id: &str) -> Result<Vec<String>> {
        let session_id = session_id.to_owned();
        self.threads
            .read(move |conn| {
                let mut st = conn.prepare_cached(
                    "SELECT id FROM inbox WHERE session_id = ?1 AND state = 'open' AND kind IN ('approval', 'question')
                 ORDER BY created_at, id",
                )?;
                let rows = st.query_map([session_id], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
                Ok(rows)
            })
            .await
    }

    /// Whether the turn has an open ask (an approval or a question).
    pub async fn turn_has_open_ask(&self, turn_id: &str) -> Result<bool> {
        let turn_id = turn_id.to_owned();
        self.threads
            .read(move |conn| {
                Ok(conn
                    .query_row(
                        "SELECT 1 FROM inbox WHERE turn_id = ?1 AND state = 'open' AND kind IN ('approval', 'question')
                         LIMIT 1",
                        [turn_id],
                        |_| Ok(()),
                    )
                    .optional()?
                    .is_some())
            })
            .await
    }

    /// Ends the open items of `kind` whose person is `person` (`None`: everyone's), as acked by
    /// `by`; the items ended.
    pub async fn ack_open_of_kind(
        &self,
        person: Option<&str>,
        kind: ItemKind,
        by: &str,
        at: f64,
    ) -> Result<Vec<ItemRow>> {
        let person = person.map(str::to_owned);
        let by = by.to_owned();
        self.threads
            .write(Durability::Durable, move |conn| {
                let mut st = conn.prepare(
                    "UPDATE inbox SET state = 'acked', ended_by = ?3, ended_at = ?4
                     WHERE state = 'open' AND kind = ?2 AND (?1 IS NULL OR person = ?1) RETURNING *",
                )?;
                let rows =
                    st.query_map(params![person, kind.as_str(), by, at], item_row)?.collect::<rusqlite::Result<_>>()?;
                Ok(rows)
            })
            .await
    }

    /// The latest ended items (newest first), for `GET /api/inbox?ended=true`.
    pub async fn ended_items(&self, person: Option<&str>, limit: usize) -> Result<Vec<ItemRow>> {
        let person = person.map(str::to_owned);
        self.threads
            .read(move |conn| {
                let mut st = conn.prepare(
                    "SELECT * FROM inbox WHERE state != 'open' AND (?1 IS NULL OR person = ?1)
                 ORDER BY ended_at DESC, id LIMIT ?2",
                )?;
                let rows = st.query_map(params![person, limit as i64], item_row)?.collect::<rusqlite::Result<_>>()?;
                Ok(rows)
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sessions::tests::store;

    fn item(id: &str, request: Option<&str>) -> ItemRow {
        ItemRow {
            id: id.into(),
            kind: ItemKind::Approval,
            state: ItemState::Open,
            person: "ana".into(),
            ask_id: Some(format!("apr_{id}")),
            request: request.map(str::to_string),
            session_id: Some("ses_1".into()),
            session_name: Some("s".into()),
            turn_id: Some("turn_1".into()),
            job_id: None,
            sandbox_id: Some("sb_1".into()),
            sandbox_name: Some("box".into()),
            title: "Bash: git push".into(),
            text: String::new(),
            options: vec![],
            tool: Some(serde_json::json!({"name": "Bash"})),
            call: None,
            created_at: 1.0,
            expires_at: Some(100.0),
            ended_at: None,
            ended_by: None,
            outcome: None,
        }
    }

    #[tokio::test]
    async fn a_request_is_recorded_once_and_the_first_end_holds() {
        let (s, _dir) = store("inbox_once").await;
        assert!(s.insert_item(&item("inb_1", Some("req-aaaaaaaa"))).await.unwrap());
        assert!(!s.insert_item(&item("inb_2", Some("req-aaaaaaaa"))).await.unwrap());
        assert!(s.has_request("sb_1", "req-aaaaaaaa").await.unwrap());
        assert_eq!(s.open_items().await.unwrap().len(), 1);
        assert_eq!(s.item("apr_inb_1").await.unwrap().unwrap().id, "inb_1");
        assert!(s.end_item("inb_1", ItemState::Allowed, "ana", Some("ok"), 2.0).await.unwrap());
        assert!(!s.end_item("inb_1", ItemState::Denied, "bob", None, 3.0).await.unwrap());
        let ended = s.item("inb_1").await.unwrap().unwrap();
        assert_eq!((ended.state, ended.ended_by.as_deref()), (ItemState::Allowed, Some("ana")));
        assert!(s.open_items().await.unwrap().is_empty());
        assert_eq!(s.ended_items(Some("ana"), 10).await.unwrap().len(), 1);
        assert!(s.ended_items(Some("bob"), 10).await.unwrap().is_empty());
    }

    /// What a turn waits for is its open asks only; a bulk ack ends one person's open items of
    /// one kind and nothing else.
    #[tokio::test]
    async fn open_asks_are_a_turns_and_a_bulk_ack_is_one_persons_one_kind() {
        let (s, _dir) = store("inbox_asks").await;
        let mut failed = item("inb_f", None);
        failed.kind = ItemKind::Failed;
        let mut theirs = item("inb_g", None);
        (theirs.kind, theirs.person) = (ItemKind::Failed, "bob".into());
        let mut question = item("inb_q", Some("req-bbbbbbbb"));
        (question.kind, question.created_at) = (ItemKind::Question, 2.0);
        for i in [item("inb_a", Some("req-aaaaaaaa")), question, failed, theirs] {
            assert!(s.insert_item(&i).await.unwrap());
        }
        assert_eq!(s.open_asks_of_session("ses_1").await.unwrap(), ["inb_a", "inb_q"]);
        assert!(s.turn_has_open_ask("turn_1").await.unwrap());
        assert!(!s.turn_has_open_ask("turn_2").await.unwrap());
        s.end_item("inb_a", ItemState::Allowed, "ana", None, 3.0).await.unwrap();
        s.end_item("inb_q", ItemState::Answered, "ana", None, 3.0).await.unwrap();
        assert!(s.open_asks_of_session("ses_1").await.unwrap().is_empty());
        assert!(!s.turn_has_open_ask("turn_1").await.unwrap(), "only open asks");

        let acked = s.ack_open_of_kind(Some("ana"), ItemKind::Failed, "ana", 4.0).await.unwrap();
        assert_eq!(acked.iter().map(|i| (i.id.as_str(), i.state)).collect::<Vec<_>>(), [("inb_f", ItemState::Acked)]);
        assert_eq!(s.item("inb_g").await.unwrap().unwrap().state, ItemState::Open, "another person's stays");
        assert!(s.ack_open_of_kind(Some("ana"), ItemKind::Failed, "ana", 5.0).await.unwrap().is_empty());
    }
}
