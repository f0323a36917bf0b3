//! A blocking client of a Remote Execution API v2 engine's CAS, ByteStream, Action Cache and Capabilities
//! services (tonic on a current-thread tokio runtime of its own).

use crate::digest::{Blob, Blobs};
use crate::RemoteError;
use bazel_remote_apis::build::bazel::remote::execution::v2 as re;
use bazel_remote_apis::google::bytestream::{byte_stream_client::ByteStreamClient, WriteRequest};
use re::action_cache_client::ActionCacheClient;
use re::capabilities_client::CapabilitiesClient;
use re::content_addressable_storage_client::ContentAddressableStorageClient;
use repro_model::remote::{RemoteEndpoint, RemoteTransport};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

/// When the server gives no batch limit: 4 MiB, gRPC's default message size.
const DEFAULT_BATCH_BYTES: i64 = 4 << 20;
/// Bytes per ByteStream write message.
const CHUNK_BYTES: usize = 1 << 20;
/// Room left in a batch for each request's digest and framing.
const PER_BLOB_OVERHEAD: i64 = 128;
/// At most this many digests per FindMissingBlobs request.
const FIND_MISSING_BATCH: usize = 10_000;

/// A connection to one engine and instance.
pub struct Remote {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) channel: Channel,
    pub(crate) endpoint: RemoteEndpoint,
    pub(crate) uri: String,
}

/// What an upload did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UploadStats {
    /// Distinct blobs the Action needs.
    pub blobs: usize,
    pub bytes: u64,
    /// The server had these already (FindMissingBlobs).
    pub present: usize,
    /// Sent by BatchUpdateBlobs.
    pub batched: usize,
    /// Sent by ByteStream Write (above the batch limit).
    pub streamed: usize,
    pub sent_bytes: u64,
}

impl Remote {
    /// Connects (eagerly: an unreachable server is reported here).
    pub fn connect(endpoint: &RemoteEndpoint) -> Result<Remote, RemoteError> {
        let uri = endpoint.url();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(RemoteError::Runtime)?;
        let conn = |detail: String| RemoteError::Connect { uri: uri.clone(), detail };
        let mut ep = Endpoint::from_shared(endpoint.uri()).map_err(|e| conn(e.to_string()))?;
        ep = ep.connect_timeout(std::time::Duration::from_secs(10));
        if endpoint.transport == RemoteTransport::Tls {
            let mut tls = ClientTlsConfig::new().domain_name(endpoint.host.clone()).with_native_roots();
            if let Some(ca) = &endpoint.ca_cert {
                let pem = std::fs::read(ca).map_err(|e| RemoteError::io("cannot read the CA certificate", ca, e))?;
                tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(pem));
            }
            ep = ep.tls_config(tls).map_err(|e| conn(format!("TLS: {e}")))?;
        }
        let channel = rt.block_on(ep.connect()).map_err(|e| conn(format!("cannot connect: {}", chain(&e))))?;
        Ok(Remote { rt, channel, endpoint: endpoint.clone(), uri })
    }

    pub(crate) fn req<T>(&self, msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        for (k, v) in &self.endpoint.headers {
            // Both were checked by config::endpoint.
            if let (Ok(k), Ok(v)) = (
                tonic::metadata::MetadataKey::<tonic::metadata::Ascii>::from_bytes(k.as_bytes()),
                v.parse::<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>(),
            ) {
                r.metadata_mut().append(k, v);
            }
        }
        r
    }

    pub(crate) fn rpc_err(&self, rpc: &'static str) -> impl Fn(tonic::Status) -> RemoteError + '_ {
        move |s| RemoteError::Rpc { uri: self.uri.clone(), rpc, code: s.code(), message: s.message().to_string() }
    }

    pub fn instance(&self) -> &str {
        &self.endpoint.instance
    }

    /// GetCapabilities.
    pub fn capabilities(&self) -> Result<re::ServerCapabilities, RemoteError> {
        let mut c = CapabilitiesClient::new(self.channel.clone());
        let r = re::GetCapabilitiesRequest { instance_name: self.endpoint.instance.clone() };
        let caps = self.rt.block_on(c.get_capabilities(self.req(r))).map_err(self.rpc_err("GetCapabilities"))?;
        Ok(caps.into_inner())
    }

    /// FindMissingBlobs: which of `digests` the CAS lacks.
    pub fn find_missing(&self, digests: &[re::Digest]) -> Result<Vec<re::Digest>, RemoteError> {
        let mut c = ContentAddressableStorageClient::new(self.channel.clone());
        let mut missing = Vec::new();
        for chunk in digests.chunks(FIND_MISSING_BATCH) {
            let r = re::FindMissingBlobsRequest {
                instance_name: self.endpoint.instance.clone(),
                blob_digests: chunk.to_vec(),
                digest_function: re::digest_function::Value::Sha256 as i32,
            };
            let resp = self.rt.block_on(c.find_missing_blobs(self.req(r))).map_err(self.rpc_err("FindMissingBlobs"))?;
            missing.extend(resp.into_inner().missing_blob_digests);
        }
        Ok(missing)
    }

    /// Uploads what the CAS lacks of `blobs`: FindMissingBlobs, then BatchUpdateBlobs in batches under the
    /// server's limit, and ByteStream Write for a blob above it.
    pub fn upload(&self, blobs: &Blobs) -> Result<UploadStats, RemoteError> {
        let caps = self.capabilities()?;
        let limit = caps
            .cache_capabilities
            .as_ref()
            .map(|c| c.max_batch_total_size_bytes)
            .filter(|&n| n > 0)
            .unwrap_or(DEFAULT_BATCH_BYTES);
        let all: Vec<re::Digest> = blobs.iter().map(|(d, _)| d.clone()).collect();
        let missing = self.find_missing(&all)?;
        let mut stats = UploadStats {
            blobs: all.len(),
            bytes: blobs.total_bytes(),
            present: all.len() - missing.len(),
            ..Default::default()
        };
        let mut batch: Vec<re::batch_update_blobs_request::Request> = Vec::new();
        let mut batch_bytes = 0i64;
        for d in &missing {
            let blob = blobs.get(d).ok_or_else(|| RemoteError::Protocol {
                uri: self.uri.clone(),
                detail: format!("FindMissingBlobs named {}/{}, which was not asked for", d.hash, d.size_bytes),
            })?;
            let cost = d.size_bytes + PER_BLOB_OVERHEAD;
            if cost > limit {
                self.write_stream(d, blob)?;
                stats.streamed += 1;
                stats.sent_bytes += d.size_bytes as u64;
                continue;
            }
            if batch_bytes + cost > limit {
                self.batch_update(std::mem::take(&mut batch))?;
                batch_bytes = 0;
            }
            batch.push(re::batch_update_blobs_request::Request {
                digest: Some(d.clone()),
                data: blob.read()?,
                compressor: 0,
            });
            batch_bytes += cost;
            stats.batched += 1;
            stats.sent_bytes += d.size_bytes as u64;
        }
        if !batch.is_empty() {
            self.batch_update(batch)?;
        }
        Ok(stats)
    }

    fn batch_update(&self, requests: Vec<re::batch_update_blobs_request::Request>) -> Result<(), RemoteError> {
        let mut c = ContentAddressableStorageClient::new(self.channel.clone());
        let r = re::BatchUpdateBlobsRequest {
            instance_name: self.endpoint.instance.clone(),
            requests,
            digest_function: re::digest_function::Value::Sha256 as i32,
        };
        let resp = self.rt.block_on(c.batch_update_blobs(self.req(r))).map_err(self.rpc_err("BatchUpdateBlobs"))?;
        for r in resp.into_inner().responses {
            let status = r.status.unwrap_or_default();
            if status.code != 0 {
                let d = r.digest.unwrap_or_default();
                return Err(RemoteError::BlobRefused {
                    uri: self.uri.clone(),
                    hash: d.hash,
                    size: d.size_bytes,
                    message: format!("code {}: {}", status.code, status.message),
                });
            }
        }
        Ok(())
    }

    /// ByteStream Write of one blob, in chunks, to `{instance}/uploads/{uuid}/blobs/{hash}/{size}`.
    fn write_stream(&self, d: &re::Digest, blob: &Blob) -> Result<(), RemoteError> {
        let data = blob.read()?;
        let mut uuid = [0u8; 16];
        getrandom::fill(&mut uuid).map_err(|e| RemoteError::Protocol {
            uri: self.uri.clone(),
            detail: format!("no randomness for an upload id: {e}"),
        })?;
        uuid[6] = (uuid[6] & 0x0f) | 0x40;
        uuid[8] = (uuid[8] & 0x3f) | 0x80;
        let h: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
        let uuid = format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..]);
        let prefix =
            if self.endpoint.instance.is_empty() { String::new() } else { format!("{}/", self.endpoint.instance) };
        let resource = format!("{prefix}uploads/{uuid}/blobs/{}/{}", d.hash, d.size_bytes);
        let mut msgs = Vec::new();
        let mut off = 0usize;
        loop {
            let end = (off + CHUNK_BYTES).min(data.len());
            msgs.push(WriteRequest {
                resource_name: if off == 0 { resource.clone() } else { String::new() },
                write_offset: off as i64,
                finish_write: end == data.len(),
                data: data[off..end].to_vec(),
            });
            off = end;
            if off >= data.len() {
                break;
            }
        }
        let mut c = ByteStreamClient::new(self.channel.clone());
        let resp = self
            .rt
            .block_on(c.write(self.req(futures_util::stream::iter(msgs))))
            .map_err(self.rpc_err("ByteStream.Write"))?
            .into_inner();
        if resp.committed_size != d.size_bytes {
            return Err(RemoteError::BlobRefused {
                uri: self.uri.clone(),
                hash: d.hash.clone(),
                size: d.size_bytes,
                message: format!("ByteStream.Write committed {} bytes", resp.committed_size),
            });
        }
        Ok(())
    }

    /// GetActionResult: the cached result of an Action, `None` when the cache has none.
    pub fn get_action_result(&self, action: &re::Digest) -> Result<Option<re::ActionResult>, RemoteError> {
        let mut c = ActionCacheClient::new(self.channel.clone());
        let r = re::GetActionResultRequest {
            instance_name: self.endpoint.instance.clone(),
            action_digest: Some(action.clone()),
            digest_function: re::digest_function::Value::Sha256 as i32,
            ..Default::default()
        };
        match self.rt.block_on(c.get_action_result(self.req(r))) {
            Ok(r) => Ok(Some(r.into_inner())),
            Err(s) if s.code() == tonic::Code::NotFound => Ok(None),
            Err(s) => Err(self.rpc_err("GetActionResult")(s)),
        }
    }

    /// UpdateActionResult: stores `result` as the Action's; returns what the server stored.
    pub fn update_action_result(
        &self,
        action: &re::Digest,
        result: re::ActionResult,
    ) -> Result<re::ActionResult, RemoteError> {
        let mut c = ActionCacheClient::new(self.channel.clone());
        let r = re::UpdateActionResultRequest {
            instance_name: self.endpoint.instance.clone(),
            action_digest: Some(action.clone()),
            action_result: Some(result),
            digest_function: re::digest_function::Value::Sha256 as i32,
            ..Default::default()
        };
        let r = self.rt.block_on(c.update_action_result(self.req(r))).map_err(self.rpc_err("UpdateActionResult"))?;
        Ok(r.into_inner())
    }
}

/// An error and its sources on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
