//! The few messages of the Remote Workers API (`google.devtools.remoteworkers.v1test2`, BuildGrid's Bots
//! service) a worker needs, written by hand (bazel-remote-apis 0.30 does not generate them; no protoc at build
//! time), and a tonic client of CreateBotSession and UpdateBotSession. Field numbers are the API's
//! (`bots.proto`, `worker.proto`); fields a worker never uses are left out (prost skips them when decoding).

use crate::{Remote, RemoteError};

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AnyMsg {
    #[prost(string, tag = "1")]
    pub type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

impl AnyMsg {
    /// Packs `msg` as `type.googleapis.com/{name}`.
    pub fn pack(name: &str, msg: &impl prost::Message) -> AnyMsg {
        AnyMsg { type_url: format!("type.googleapis.com/{name}"), value: msg.encode_to_vec() }
    }

    /// Whether it holds the message named `name` (the type URL's last segment).
    pub fn is(&self, name: &str) -> bool {
        self.type_url.rsplit('/').next() == Some(name)
    }
}

/// `google.rpc.Status` (without details).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// `Device.Property` and `Worker.Property`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Property {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Device {
    #[prost(string, tag = "1")]
    pub handle: String,
    #[prost(message, repeated, tag = "2")]
    pub properties: Vec<Property>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Worker {
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<Device>,
    #[prost(message, repeated, tag = "2")]
    pub properties: Vec<Property>,
}

/// `LeaseState`.
pub mod lease_state {
    pub const PENDING: i32 = 1;
    pub const ACTIVE: i32 = 2;
    pub const COMPLETED: i32 = 4;
    pub const CANCELLED: i32 = 5;
}

/// `BotStatus`.
pub mod bot_status {
    pub const OK: i32 = 1;
    pub const BOT_TERMINATING: i32 = 4;
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Lease {
    #[prost(string, tag = "7")]
    pub id: String,
    #[prost(message, optional, tag = "8")]
    pub payload: Option<AnyMsg>,
    #[prost(message, optional, tag = "9")]
    pub result: Option<AnyMsg>,
    #[prost(int32, tag = "2")]
    pub state: i32,
    #[prost(message, optional, tag = "3")]
    pub status: Option<RpcStatus>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct BotSession {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub bot_id: String,
    #[prost(int32, tag = "3")]
    pub status: i32,
    #[prost(message, optional, tag = "4")]
    pub worker: Option<Worker>,
    #[prost(message, repeated, tag = "5")]
    pub leases: Vec<Lease>,
    #[prost(string, tag = "7")]
    pub version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateBotSessionRequest {
    #[prost(string, tag = "1")]
    pub parent: String,
    #[prost(message, optional, tag = "2")]
    pub bot_session: Option<BotSession>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateBotSessionRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub bot_session: Option<BotSession>,
}

const SERVICE: &str = "google.devtools.remoteworkers.v1test2.Bots";

impl Remote {
    async fn bots_unary<Q, R>(&self, method: &'static str, req: tonic::Request<Q>) -> Result<R, tonic::Status>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready().await.map_err(|e| tonic::Status::unavailable(format!("Bots service not ready: {e}")))?;
        let path = http::uri::PathAndQuery::try_from(format!("/{SERVICE}/{method}"))
            .map_err(|e| tonic::Status::internal(e.to_string()))?;
        let codec = tonic_prost::ProstCodec::<Q, R>::default();
        grpc.unary(req, path, codec).await.map(|r| r.into_inner())
    }

    /// CreateBotSession under the endpoint's instance.
    pub fn create_bot_session(&self, session: BotSession) -> Result<BotSession, RemoteError> {
        let r = CreateBotSessionRequest { parent: self.endpoint.instance.clone(), bot_session: Some(session) };
        let req = self.req(r);
        self.rt.block_on(self.bots_unary("CreateBotSession", req)).map_err(self.rpc_err("CreateBotSession"))
    }

    /// UpdateBotSession; the server may hold it until it has a lease or `wait` passes (then DeadlineExceeded,
    /// which is `Ok(None)`).
    pub fn update_bot_session(
        &self,
        session: BotSession,
        wait: std::time::Duration,
    ) -> Result<Option<BotSession>, RemoteError> {
        let r = UpdateBotSessionRequest { name: session.name.clone(), bot_session: Some(session) };
        let mut req = self.req(r);
        req.set_timeout(wait);
        match self.rt.block_on(self.bots_unary("UpdateBotSession", req)) {
            Ok(s) => Ok(Some(s)),
            Err(s) if s.code() == tonic::Code::DeadlineExceeded => Ok(None),
            Err(s) => Err(self.rpc_err("UpdateBotSession")(s)),
        }
    }
}
