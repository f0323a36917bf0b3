//! Reading blobs from the CAS (BatchReadBlobs, ByteStream Read above the batch limit), each checked against its
//! SHA-256, and materializing an input root into a private directory: bounded (total bytes, files and
//! directories counted from the digests before anything is written), names checked (one component, not `.` or
//! `..`, each once per directory), everything created through directory descriptors that never follow a link
//! ([`repro_pack::extract::Beneath`]), symbolic links only written, never followed.

use crate::digest::digest_of;
use crate::{Remote, RemoteError};
use bazel_remote_apis::build::bazel::remote::execution::v2 as re;
use bazel_remote_apis::google::bytestream::{byte_stream_client::ByteStreamClient, ReadRequest};
use prost::Message;
use repro_pack::extract::Beneath;
use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;

/// What an input root may hold at most.
#[derive(Debug, Clone, Copy)]
pub struct TreeLimits {
    pub max_bytes: u64,
    pub max_entries: u64,
}

impl Default for TreeLimits {
    fn default() -> TreeLimits {
        let l = repro_pack::Limits::default();
        TreeLimits { max_bytes: l.max_unpacked_size, max_entries: l.max_entries }
    }
}

impl Remote {
    fn protocol(&self, detail: String) -> RemoteError {
        RemoteError::Protocol { uri: self.uri.clone(), detail }
    }

    /// One blob, checked against its digest.
    pub fn read_blob(&self, d: &re::Digest) -> Result<Vec<u8>, RemoteError> {
        if d.size_bytes < 0 {
            return Err(self.protocol(format!("blob {}: negative size {}", d.hash, d.size_bytes)));
        }
        let data = if d.size_bytes <= 1 << 20 {
            let mut c =
                re::content_addressable_storage_client::ContentAddressableStorageClient::new(self.channel.clone());
            let r = re::BatchReadBlobsRequest {
                instance_name: self.endpoint.instance.clone(),
                digests: vec![d.clone()],
                digest_function: re::digest_function::Value::Sha256 as i32,
                ..Default::default()
            };
            let resp = self.rt.block_on(c.batch_read_blobs(self.req(r))).map_err(self.rpc_err("BatchReadBlobs"))?;
            let one = resp.into_inner().responses.into_iter().next();
            let one = one.ok_or_else(|| self.protocol(format!("BatchReadBlobs returned nothing for {}", d.hash)))?;
            let st = one.status.unwrap_or_default();
            if st.code != 0 {
                return Err(
                    self.protocol(format!("blob {}/{}: code {}: {}", d.hash, d.size_bytes, st.code, st.message))
                );
            }
            one.data.to_vec()
        } else {
            let prefix =
                if self.endpoint.instance.is_empty() { String::new() } else { format!("{}/", self.endpoint.instance) };
            let r = ReadRequest {
                resource_name: format!("{prefix}blobs/{}/{}", d.hash, d.size_bytes),
                read_offset: 0,
                read_limit: 0,
            };
            let mut c = ByteStreamClient::new(self.channel.clone());
            let max = d.size_bytes as usize;
            let uri = self.uri.clone();
            self.rt.block_on(async {
                let mut s = c.read(self.req(r)).await.map_err(self.rpc_err("ByteStream.Read"))?.into_inner();
                let mut data = Vec::with_capacity(max.min(64 << 20));
                while let Some(m) = s.message().await.map_err(self.rpc_err("ByteStream.Read"))? {
                    if data.len() + m.data.len() > max {
                        return Err(RemoteError::Protocol {
                            uri: uri.clone(),
                            detail: format!("ByteStream.Read of {} sent more than {max} bytes", d.hash),
                        });
                    }
                    data.extend_from_slice(&m.data);
                }
                Ok(data)
            })?
        };
        let got = digest_of(&data);
        if got != *d {
            return Err(self.protocol(format!(
                "blob {}/{}: the CAS sent content of digest {}/{}",
                d.hash, d.size_bytes, got.hash, got.size_bytes
            )));
        }
        Ok(data)
    }

    /// A message stored in the CAS.
    pub fn read_message<M: Message + Default>(&self, d: &re::Digest, what: &str) -> Result<M, RemoteError> {
        let data = self.read_blob(d)?;
        M::decode(data.as_slice()).map_err(|e| self.protocol(format!("{what} {}: not a valid message: {e}", d.hash)))
    }

    /// Writes the input root `root` into the empty directory `dest`, within `limits`.
    pub fn materialize(&self, root: &re::Digest, dest: &Path, limits: TreeLimits) -> Result<(), RemoteError> {
        let top = Beneath::open(dest).map_err(|e| RemoteError::io("cannot open", dest, e))?;
        let mut budget = Budget { bytes: 0, entries: 0, limits };
        self.write_dir(root, &top, "", &mut budget, 0)
    }

    fn write_dir(
        &self,
        d: &re::Digest,
        here: &Beneath,
        path: &str,
        budget: &mut Budget,
        depth: usize,
    ) -> Result<(), RemoteError> {
        if depth > 256 {
            return Err(self.protocol(format!("input root: '{path}' is nested more than 256 levels deep")));
        }
        budget.take(self, path, 0, 1)?;
        if d.size_bytes as u64 > budget.limits.max_bytes {
            return Err(self.protocol(format!("input root: directory '{path}' is {} bytes", d.size_bytes)));
        }
        let dir: re::Directory = self.read_message(d, "Directory")?;
        let mut seen = BTreeSet::new();
        let names = dir
            .files
            .iter()
            .map(|f| &f.name)
            .chain(dir.directories.iter().map(|x| &x.name))
            .chain(dir.symlinks.iter().map(|s| &s.name));
        for n in names {
            if n.is_empty() || n == "." || n == ".." || n.contains('/') || n.contains('\0') {
                return Err(self.protocol(format!("input root: '{path}' holds the name {n:?}")));
            }
            if !seen.insert(n.clone()) {
                return Err(self.protocol(format!("input root: '{path}/{n}' is named twice")));
            }
        }
        let io = |what: &'static str, n: &str| {
            let p = format!("{path}/{n}");
            move |e| RemoteError::io(what, p, e)
        };
        for f in &dir.files {
            let fd = f.digest.clone().unwrap_or_default();
            budget.take(self, path, fd.size_bytes.max(0) as u64, 1)?;
            let data = self.read_blob(&fd)?;
            let mode = if f.is_executable { 0o755 } else { 0o644 };
            let mut out = here.create_file(f.name.as_str(), mode).map_err(io("cannot create", &f.name))?;
            out.write_all(&data).map_err(io("cannot write", &f.name))?;
        }
        for s in &dir.symlinks {
            budget.take(self, path, 0, 1)?;
            here.symlink(s.target.as_str(), s.name.as_str()).map_err(io("cannot create the link", &s.name))?;
        }
        for sub in &dir.directories {
            let child = here.subdir(sub.name.as_str(), Some(0o755)).map_err(io("cannot create", &sub.name))?;
            let sd = sub.digest.clone().unwrap_or_default();
            self.write_dir(&sd, &child, &format!("{path}/{}", sub.name), budget, depth + 1)?;
        }
        Ok(())
    }
}

struct Budget {
    bytes: u64,
    entries: u64,
    limits: TreeLimits,
}

impl Budget {
    fn take(&mut self, r: &Remote, path: &str, bytes: u64, entries: u64) -> Result<(), RemoteError> {
        self.bytes = self.bytes.saturating_add(bytes);
        self.entries = self.entries.saturating_add(entries);
        if self.bytes > self.limits.max_bytes || self.entries > self.limits.max_entries {
            return Err(r.protocol(format!(
                "input root: at '{path}' it exceeds {} bytes or {} entries (refused)",
                self.limits.max_bytes, self.limits.max_entries
            )));
        }
        Ok(())
    }
}
