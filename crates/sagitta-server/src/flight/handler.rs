//! What a DoAction handler is. Each action is one row of the table in
//! [`super::actions`]: its name, the role it needs, where its work runs
//! ([`On`]), its description (ListActions), and a typed handler: a
//! [`Handler`] whose [`Body`] is parsed from the action's bytes before any
//! work is queued. [`call`] is the one dispatcher every row goes through.

use crate::auth::Role;
use crate::error::{ApiError, ApiResult};
use crate::exec::Work;
use crate::fastjson::{self, WithVector};
use crate::registry::Entry;
use crate::State;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use serde::Deserialize;
use serde_json::Value as Json;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tonic::Status;

/// Where an action's work runs.
#[derive(Debug, Clone, Copy)]
pub enum On {
    /// On the I/O thread that received it: answers from memory only.
    Io,
    /// On a pool ([`crate::exec::Exec::run`]): refused once shutdown began
    /// or when the pool is full.
    Pool(Work),
    /// On a thread of its own that waits for background work
    /// ([`crate::exec::Exec::run_wait`]), named for the metrics.
    Wait(&'static str),
}

/// One DoAction: a row of the table.
pub struct Action {
    /// The action type clients send.
    pub name: &'static str,
    /// The role its caller needs.
    pub role: Role,
    /// Where its work runs.
    pub on: On,
    /// Its ListActions description.
    pub about: &'static str,
    /// [`call`] for its handler.
    pub call: Call,
}

/// Runs an action on a body: the collection its metrics are labelled with
/// (empty for none) and the result bodies.
pub type Call = fn(Arc<State>, &'static Action, Bytes) -> BoxFuture<'static, Answer>;

/// An action's outcome: its metrics label and its result bodies.
pub type Answer = (String, Result<Vec<Bytes>, Status>);

impl std::fmt::Debug for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Action")
            .field("name", &self.name)
            .field("role", &self.role)
            .field("on", &self.on)
            .finish_non_exhaustive()
    }
}

/// An action's body, parsed before any work is queued.
pub trait Body: Sized + Send + 'static {
    /// Parses `b`; `what` names the action in the error (INVALID_ARGUMENT).
    fn parse(what: &str, b: &[u8]) -> Result<Self, Status>;

    /// The collection the request names (its metrics label), if any.
    fn label(&self) -> &str {
        ""
    }
}

/// The body of an action that takes none: whatever is sent is ignored.
#[derive(Debug)]
pub struct NoBody;

impl Body for NoBody {
    fn parse(_: &str, _: &[u8]) -> Result<Self, Status> {
        Ok(NoBody)
    }
}

/// A typed action handler.
pub trait Handler {
    /// Its body.
    type Body: Body;
    /// Whether the collection its body names ([`Body::label`]) is looked
    /// up before the work is queued (NOT_FOUND at once) and handed over
    /// as [`Cx::entry`].
    const RESOLVE: bool = false;
    /// The work, run where its row says.
    fn run(cx: &Cx, body: Self::Body) -> ApiResult<Reply>;
}

/// What a handler runs with.
#[derive(Debug)]
pub struct Cx {
    /// The server's state.
    pub st: Arc<State>,
    /// The action type called (several names share a handler).
    pub kind: &'static str,
    entry: Option<Arc<Entry>>,
}

impl Cx {
    /// The collection resolved for a [`Handler::RESOLVE`] handler.
    pub fn entry(&self) -> ApiResult<&Arc<Entry>> {
        self.entry
            .as_ref()
            .ok_or_else(|| ApiError::Internal(format!("{}: no collection resolved", self.kind)))
    }
}

/// A handler's answer.
#[derive(Debug)]
pub enum Reply {
    /// One JSON result body.
    Json(Json),
    /// Result bodies as they are (e.g. one Arrow IPC stream per query).
    Bodies(Vec<Bytes>),
}

impl Reply {
    fn into_bodies(self) -> Vec<Bytes> {
        match self {
            Reply::Json(j) => vec![Bytes::from(j.to_string())],
            Reply::Bodies(b) => b,
        }
    }
}

/// The one dispatcher: parses the body, resolves the collection where the
/// handler asks, and runs the handler where `row` says.
pub fn call<H: Handler + 'static>(
    st: Arc<State>,
    row: &'static Action,
    body: Bytes,
) -> BoxFuture<'static, Answer> {
    async move {
        let b = match H::Body::parse(row.name, &body) {
            Ok(b) => b,
            Err(s) => return (String::new(), Err(s)),
        };
        let label = b.label().to_string();
        let entry = if H::RESOLVE {
            match st.registry.get(&label) {
                Ok(e) => Some(e),
                Err(e) => return (label, Err(e.to_status())),
            }
        } else {
            None
        };
        let cx = Cx {
            st: st.clone(),
            kind: row.name,
            entry,
        };
        let accepting = || st.accepting.load(Ordering::Acquire);
        let r = match row.on {
            On::Io => H::run(&cx, b),
            On::Pool(_) | On::Wait(_) if !accepting() => Err(ApiError::ShuttingDown),
            On::Pool(work) => st.exec.run(work, move || H::run(&cx, b)).await,
            On::Wait(name) => st.exec.run_wait(name, move || H::run(&cx, b)).await,
        };
        (label, r.map(Reply::into_bodies).map_err(|e| e.to_status()))
    }
    .boxed()
}

/// INVALID_ARGUMENT.
pub fn invalid(msg: impl Into<String>) -> Status {
    ApiError::BadRequest(msg.into()).to_status()
}

/// A JSON body.
pub fn json_body<T: for<'de> Deserialize<'de>>(what: &str, b: &[u8]) -> Result<T, Status> {
    serde_json::from_slice(b).map_err(|e| invalid(format!("{what}: invalid JSON: {e}")))
}

/// [`json_body`] for a body whose query vector the fast path reads.
pub fn vector_body<T: WithVector>(what: &str, b: &[u8]) -> Result<T, Status> {
    fastjson::from_slice(b).map_err(|e| invalid(format!("{what}: invalid JSON: {e}")))
}
