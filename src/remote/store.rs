//! The object store seam: the few calls roger makes to a bucket, synchronous, behind one
//! trait ([`Store`]). [`S3`] is the real one (object_store's S3 client on a small tokio
//! runtime: SigV4, per-part SHA-256 checksums, conditional puts, retries with backoff);
//! [`Memory`] is a bucket in memory for the logic's tests. Errors name the bucket and key and
//! never carry a credential.

use super::Remote;
use anyhow::Result;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// What a HEAD or a write says about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub size: u64,
    pub etag: Option<String>,
    pub version: Option<String>,
}

/// A write's condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cond {
    Overwrite,
    /// If-None-Match: * (the first writer of the key).
    Create,
    /// If-Match: this ETag (nobody wrote it since we read it).
    IfMatch(String),
}

#[derive(Debug)]
pub enum StoreError {
    NotFound(String),
    /// A conditional write lost (412 / 409): somebody else wrote the key.
    Conflict(String),
    /// 401/403: the credentials are wrong or lack the permission.
    Denied(String),
    /// The client cannot be set up or cannot build a request (a bad endpoint): no retry helps.
    Config(String),
    Other(String),
}

impl StoreError {
    /// An error that retrying cannot mend (refused credentials, no such bucket or key, a
    /// configuration error): the uploader stops on it and says so instead of retrying.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            StoreError::NotFound(_) | StoreError::Denied(_) | StoreError::Config(_)
        )
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::NotFound(m)
            | StoreError::Conflict(m)
            | StoreError::Denied(m)
            | StoreError::Config(m)
            | StoreError::Other(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for StoreError {}

pub type StoreResult<T> = std::result::Result<T, StoreError>;

/// Where streamed bytes go; an error stops the read.
pub type Sink<'a> = dyn FnMut(&[u8]) -> std::result::Result<(), String> + 'a;

pub trait Store: Send + Sync {
    /// `s3://bucket` (and the endpoint when it is not AWS), for messages.
    fn describe(&self) -> String;
    fn head(&self, key: &str) -> StoreResult<Option<Meta>>;
    fn get(&self, key: &str) -> StoreResult<Option<(Vec<u8>, Meta)>>;
    /// Bytes `start..end` of the object, handed to `sink` as they arrive (nothing buffered
    /// beyond the transport's chunks). Returns how many bytes came.
    fn read_range(&self, key: &str, start: u64, end: u64, sink: &mut Sink<'_>) -> StoreResult<u64>;
    fn put(&self, key: &str, body: Vec<u8>, cond: Cond) -> StoreResult<Meta>;
    fn create_multipart(&self, key: &str) -> StoreResult<String>;
    /// Part `idx` (0-based) of an upload; returns what completion needs for it.
    fn put_part(&self, key: &str, upload: &str, idx: usize, body: Vec<u8>) -> StoreResult<String>;
    fn complete_multipart(&self, key: &str, upload: &str, parts: Vec<String>) -> StoreResult<Meta>;
    fn abort_multipart(&self, key: &str, upload: &str) -> StoreResult<()>;
    fn delete(&self, key: &str) -> StoreResult<()>;
    /// Keys (and sizes) under a prefix.
    fn list(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>>;
}

/// The real bucket.
pub struct S3 {
    rt: tokio::runtime::Runtime,
    s3: object_store::aws::AmazonS3,
    bucket: String,
    /// " (endpoint URL from WHERE)", or empty for AWS itself: for messages.
    endpoint: String,
}

fn note(e: Option<&super::endpoint::Endpoint>) -> String {
    e.map_or(String::new(), |e| {
        format!(" (endpoint {} from {})", e.url, e.source)
    })
}

impl S3 {
    pub fn open(remote: &Remote) -> Result<S3> {
        use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, Checksum, S3ConditionalPut};
        use object_store::{BackoffConfig, ClientOptions, RetryConfig};
        let cfg = &remote.cfg;
        let env = super::creds::Env::real();
        let files = super::creds::from_files(&env);
        let endpoint = super::endpoint::resolve(cfg.endpoint.as_deref(), &env, files.as_ref())
            .map_err(|e| {
                anyhow::Error::new(StoreError::Config(format!(
                    "remote {}: {e}",
                    remote.target.url()
                )))
            })?;
        // The AWS_* variables as object_store reads them, except the endpoint and whether
        // plain http is allowed: those two are decided above, the way the AWS SDKs decide.
        let mut b = AmazonS3Builder::new();
        for (k, v) in &env.vars {
            let k = k.to_ascii_lowercase();
            if matches!(
                k.as_str(),
                "aws_endpoint" | "aws_endpoint_url" | "aws_allow_http"
            ) {
                continue;
            }
            if let Ok(key) = k.parse::<AmazonS3ConfigKey>() {
                b = b.with_config(key, v);
            }
        }
        b = b
            .with_bucket_name(&remote.target.bucket)
            .with_checksum_algorithm(Checksum::SHA256)
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            .with_virtual_hosted_style_request(cfg.virtual_hosted)
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: std::time::Duration::from_millis(100),
                    max_backoff: std::time::Duration::from_secs(15),
                    base: 2.0,
                },
                max_retries: cfg.max_retries,
                retry_timeout: cfg.timeout.0 * 3,
            })
            .with_client_options(
                ClientOptions::new()
                    .with_timeout(cfg.timeout.0)
                    .with_connect_timeout(std::time::Duration::from_secs(10))
                    .with_allow_http(endpoint.as_ref().is_some_and(|e| e.allow_http())),
            );
        if let Some(e) = &endpoint {
            b = b.with_endpoint(&e.url);
        }
        let region = cfg
            .region
            .clone()
            .or_else(|| std::env::var("AWS_REGION").ok())
            .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
            .or_else(|| files.as_ref().and_then(|f| f.region.clone()))
            .unwrap_or_else(|| "us-east-1".into());
        b = b.with_region(region);
        // The shared credentials file only where the environment names no credentials of
        // its own: static keys, a web identity token or a container role come first.
        if !super::creds::env_has_credentials(&env) {
            if let Some(k) = files.and_then(|f| f.keys) {
                b = b
                    .with_access_key_id(k.access_key_id)
                    .with_secret_access_key(k.secret_access_key);
                if let Some(t) = k.session_token {
                    b = b.with_config(AmazonS3ConfigKey::Token, t);
                }
            }
        }
        let note = note(endpoint.as_ref());
        let s3 = b.build().map_err(|e| {
            anyhow::Error::new(StoreError::Config(format!(
                "remote {}{note}: cannot set up the S3 client: {}",
                remote.target.url(),
                scrub(&e.to_string())
            )))
        })?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("roger-s3")
            .enable_all()
            .build()?;
        Ok(S3 {
            rt,
            s3,
            bucket: remote.target.bucket.clone(),
            endpoint: note,
        })
    }

    fn err(&self, key: &str, what: &str, e: object_store::Error) -> StoreError {
        let at = format!("s3://{}/{key}", self.bucket);
        let msg = scrub(&e.to_string());
        match e {
            object_store::Error::NotFound { .. } => {
                if msg.contains("NoSuchBucket") {
                    StoreError::NotFound(format!(
                        "{what} {at}: no such bucket {:?}{}: create it, or fix [publish] remote",
                        self.bucket,
                        self.endpoint_note()
                    ))
                } else {
                    StoreError::NotFound(format!("{what} {at}: not found"))
                }
            }
            object_store::Error::Precondition { .. } | object_store::Error::AlreadyExists { .. } => {
                StoreError::Conflict(format!(
                    "{what} {at}: somebody else wrote it since it was read (conditional write refused)"
                ))
            }
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => StoreError::Denied(format!(
                "{what} {at}: access denied{} — check the credentials roger found (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE and ~/.aws/credentials, the web identity token or the instance role) and that they may read and write this bucket: {msg}",
                self.endpoint_note()
            )),
            _ if msg.contains("NoSuchBucket") => StoreError::NotFound(format!(
                "{what} {at}: no such bucket {:?}{}: create it, or fix [publish] remote",
                self.bucket,
                self.endpoint_note()
            )),
            _ if msg.contains("403 Forbidden")
                || msg.contains("InvalidAccessKeyId")
                || msg.contains("SignatureDoesNotMatch") =>
            {
                StoreError::Denied(format!(
                    "{what} {at}: access denied{} — check the credentials roger found (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE and ~/.aws/credentials, the web identity token or the instance role): {msg}",
                    self.endpoint_note()
                ))
            }
            // The HTTP client would not even build the request: a configuration error that
            // no retry mends (object_store says only "builder error").
            _ if msg.contains("builder error") => StoreError::Config(format!(
                "{what} {at}{}: the HTTP client refused to build the request (a malformed endpoint URL, or plain http where https is required): check the endpoint and [remote]: {msg}",
                self.endpoint_note()
            )),
            _ => StoreError::Other(format!("{what} {at}{}: {msg}", self.endpoint_note())),
        }
    }

    fn endpoint_note(&self) -> String {
        self.endpoint.clone()
    }
}

/// Error texts from the HTTP stack may quote a request; keep anything that looks like a
/// credential out (roger's rule: no secret in an error). Signatures and tokens are cut.
pub fn scrub(msg: &str) -> String {
    let mut out = msg.to_string();
    for var in [
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ACCESS_KEY_ID",
    ] {
        if let Ok(v) = std::env::var(var) {
            if v.len() >= 4 {
                out = out.replace(&v, "[redacted]");
            }
        }
    }
    for marker in ["X-Amz-Signature=", "X-Amz-Security-Token=", "Signature="] {
        let mut from = 0;
        while let Some(i) = out[from..].find(marker) {
            let start = from + i + marker.len();
            let end = out[start..]
                .find(|c: char| c == '&' || c == ',' || c.is_whitespace() || c == '"')
                .map_or(out.len(), |e| start + e);
            out.replace_range(start..end, "[redacted]");
            from = start + "[redacted]".len();
        }
    }
    out
}

fn path(key: &str) -> object_store::path::Path {
    object_store::path::Path::from(key)
}

fn meta_of(r: object_store::PutResult, size: u64) -> Meta {
    Meta {
        size,
        etag: r.e_tag,
        version: r.version,
    }
}

impl Store for S3 {
    fn describe(&self) -> String {
        format!("s3://{}{}", self.bucket, self.endpoint_note())
    }

    fn head(&self, key: &str) -> StoreResult<Option<Meta>> {
        use object_store::ObjectStore;
        match self.rt.block_on(self.s3.head(&path(key))) {
            Ok(m) => Ok(Some(Meta {
                size: m.size,
                etag: m.e_tag,
                version: m.version,
            })),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err(key, "reading", e)),
        }
    }

    fn get(&self, key: &str) -> StoreResult<Option<(Vec<u8>, Meta)>> {
        use object_store::ObjectStore;
        let r = self.rt.block_on(async {
            let g = self.s3.get(&path(key)).await?;
            let m = g.meta.clone();
            let b = g.bytes().await?;
            Ok::<_, object_store::Error>((b, m))
        });
        match r {
            Ok((b, m)) => Ok(Some((
                b.to_vec(),
                Meta {
                    size: m.size,
                    etag: m.e_tag,
                    version: m.version,
                },
            ))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err(key, "reading", e)),
        }
    }

    fn read_range(&self, key: &str, start: u64, end: u64, sink: &mut Sink<'_>) -> StoreResult<u64> {
        use futures::StreamExt;
        use object_store::{GetOptions, GetRange, ObjectStore};
        let r = self.rt.block_on(async {
            let opts = GetOptions {
                range: Some(GetRange::Bounded(start..end)),
                ..Default::default()
            };
            let mut stream = self.s3.get_opts(&path(key), opts).await?.into_stream();
            let mut n = 0u64;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk?;
                n += chunk.len() as u64;
                if let Err(e) = sink(&chunk) {
                    return Ok(Err(e));
                }
            }
            Ok::<_, object_store::Error>(Ok(n))
        });
        match r {
            Ok(Ok(n)) => Ok(n),
            Ok(Err(e)) => Err(StoreError::Other(e)),
            Err(e) => Err(self.err(key, "reading", e)),
        }
    }

    fn put(&self, key: &str, body: Vec<u8>, cond: Cond) -> StoreResult<Meta> {
        use object_store::{ObjectStore, PutMode, PutOptions, UpdateVersion};
        let size = body.len() as u64;
        let mode = match cond {
            Cond::Overwrite => PutMode::Overwrite,
            Cond::Create => PutMode::Create,
            Cond::IfMatch(e) => PutMode::Update(UpdateVersion {
                e_tag: Some(e),
                version: None,
            }),
        };
        let opts = PutOptions {
            mode,
            ..Default::default()
        };
        self.rt
            .block_on(self.s3.put_opts(&path(key), body.into(), opts))
            .map(|r| meta_of(r, size))
            .map_err(|e| self.err(key, "writing", e))
    }

    fn create_multipart(&self, key: &str) -> StoreResult<String> {
        use object_store::multipart::MultipartStore;
        self.rt
            .block_on(self.s3.create_multipart(&path(key)))
            .map_err(|e| self.err(key, "starting an upload of", e))
    }

    fn put_part(&self, key: &str, upload: &str, idx: usize, body: Vec<u8>) -> StoreResult<String> {
        use object_store::multipart::MultipartStore;
        self.rt
            .block_on(
                self.s3
                    .put_part(&path(key), &upload.to_string(), idx, body.into()),
            )
            .map(|p| p.content_id)
            .map_err(|e| self.err(key, &format!("uploading part {} of", idx + 1), e))
    }

    fn complete_multipart(&self, key: &str, upload: &str, parts: Vec<String>) -> StoreResult<Meta> {
        use object_store::multipart::{MultipartStore, PartId};
        let parts = parts
            .into_iter()
            .map(|content_id| PartId { content_id })
            .collect();
        self.rt
            .block_on(
                self.s3
                    .complete_multipart(&path(key), &upload.to_string(), parts),
            )
            .map(|r| meta_of(r, 0))
            .map_err(|e| self.err(key, "completing the upload of", e))
    }

    fn abort_multipart(&self, key: &str, upload: &str) -> StoreResult<()> {
        use object_store::multipart::MultipartStore;
        self.rt
            .block_on(self.s3.abort_multipart(&path(key), &upload.to_string()))
            .map_err(|e| self.err(key, "aborting the upload of", e))
    }

    fn delete(&self, key: &str) -> StoreResult<()> {
        use object_store::ObjectStore;
        match self.rt.block_on(self.s3.delete(&path(key))) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err(key, "deleting", e)),
        }
    }

    fn list(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>> {
        use futures::TryStreamExt;
        use object_store::ObjectStore;
        let p = path(prefix);
        self.rt
            .block_on(
                self.s3
                    .list(Some(&p))
                    .map_ok(|m| (m.location.to_string(), m.size))
                    .try_collect::<Vec<_>>(),
            )
            .map_err(|e| self.err(prefix, "listing", e))
    }
}

/// An open multipart upload in [`Memory`]: its key and the parts received.
type OpenUpload = (String, BTreeMap<usize, Vec<u8>>);

/// A bucket in memory, for the logic's tests: ETags change on every write, conditional writes
/// are honoured, and faults can be set.
#[derive(Default)]
pub struct Memory {
    pub objects: Mutex<BTreeMap<String, (Vec<u8>, String)>>,
    uploads: Mutex<BTreeMap<String, OpenUpload>>,
    counter: Mutex<u64>,
    /// Keys whose next stored object is cut to this many bytes (a truncating proxy).
    pub truncate: Mutex<BTreeMap<String, usize>>,
    /// Fail this many part uploads before succeeding.
    pub fail_parts: Mutex<usize>,
}

impl Memory {
    fn tag(&self) -> String {
        let mut c = self.counter.lock().unwrap();
        *c += 1;
        format!("\"etag-{c}\"")
    }

    pub fn uploads_open(&self) -> usize {
        self.uploads.lock().unwrap().len()
    }

    /// Bytes `start..end` of an object.
    fn get_range(&self, key: &str, start: u64, end: u64) -> StoreResult<Vec<u8>> {
        let o = self.objects.lock().unwrap();
        let (b, _) = o
            .get(key)
            .ok_or_else(|| StoreError::NotFound(format!("{key}: not found")))?;
        let end = (end as usize).min(b.len());
        Ok(b.get(start as usize..end).unwrap_or_default().to_vec())
    }
}

impl Store for Memory {
    fn describe(&self) -> String {
        "s3://memory".into()
    }
    fn head(&self, key: &str) -> StoreResult<Option<Meta>> {
        Ok(self.objects.lock().unwrap().get(key).map(|(b, e)| Meta {
            size: b.len() as u64,
            etag: Some(e.clone()),
            version: None,
        }))
    }
    fn get(&self, key: &str) -> StoreResult<Option<(Vec<u8>, Meta)>> {
        Ok(self.objects.lock().unwrap().get(key).map(|(b, e)| {
            (
                b.clone(),
                Meta {
                    size: b.len() as u64,
                    etag: Some(e.clone()),
                    version: None,
                },
            )
        }))
    }
    fn read_range(&self, key: &str, start: u64, end: u64, sink: &mut Sink<'_>) -> StoreResult<u64> {
        let bytes = self.get_range(key, start, end)?;
        for c in bytes.chunks(64 << 10) {
            sink(c).map_err(StoreError::Other)?;
        }
        Ok(bytes.len() as u64)
    }
    fn put(&self, key: &str, mut body: Vec<u8>, cond: Cond) -> StoreResult<Meta> {
        let tag = self.tag();
        let mut o = self.objects.lock().unwrap();
        match (&cond, o.get(key)) {
            (Cond::Create, Some(_)) => return Err(StoreError::Conflict(format!("{key}: exists"))),
            (Cond::IfMatch(e), Some((_, cur))) if e != cur => {
                return Err(StoreError::Conflict(format!("{key}: changed")))
            }
            (Cond::IfMatch(_), None) => return Err(StoreError::Conflict(format!("{key}: gone"))),
            _ => {}
        }
        if let Some(n) = self.truncate.lock().unwrap().remove(key) {
            body.truncate(n);
        }
        let size = body.len() as u64;
        o.insert(key.to_string(), (body, tag.clone()));
        Ok(Meta {
            size,
            etag: Some(tag),
            version: None,
        })
    }
    fn create_multipart(&self, key: &str) -> StoreResult<String> {
        let id = self.tag().trim_matches('"').to_string();
        self.uploads
            .lock()
            .unwrap()
            .insert(id.clone(), (key.to_string(), BTreeMap::new()));
        Ok(id)
    }
    fn put_part(&self, _key: &str, upload: &str, idx: usize, body: Vec<u8>) -> StoreResult<String> {
        {
            let mut f = self.fail_parts.lock().unwrap();
            if *f > 0 {
                *f -= 1;
                return Err(StoreError::Other("connection reset by peer".into()));
            }
        }
        let mut u = self.uploads.lock().unwrap();
        let (_, parts) = u
            .get_mut(upload)
            .ok_or_else(|| StoreError::NotFound(format!("upload {upload}: no such upload")))?;
        parts.insert(idx, body);
        Ok(format!("part-{idx}"))
    }
    fn complete_multipart(&self, key: &str, upload: &str, parts: Vec<String>) -> StoreResult<Meta> {
        let (_, got) = self
            .uploads
            .lock()
            .unwrap()
            .remove(upload)
            .ok_or_else(|| StoreError::NotFound(format!("upload {upload}: no such upload")))?;
        let mut body = Vec::new();
        for (i, _) in parts.iter().enumerate() {
            body.extend_from_slice(got.get(&i).ok_or_else(|| {
                StoreError::Other(format!("upload {upload}: part {} missing", i + 1))
            })?);
        }
        self.put(key, body, Cond::Overwrite)
    }
    fn abort_multipart(&self, _key: &str, upload: &str) -> StoreResult<()> {
        self.uploads.lock().unwrap().remove(upload);
        Ok(())
    }
    fn delete(&self, key: &str) -> StoreResult<()> {
        self.objects.lock().unwrap().remove(key);
        Ok(())
    }
    fn list(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>> {
        Ok(self
            .objects
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, (b, _))| (k.clone(), b.len() as u64))
            .collect())
    }
}

/// A shared store is a store (tests hand one bucket to several users).
impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn head(&self, key: &str) -> StoreResult<Option<Meta>> {
        (**self).head(key)
    }
    fn get(&self, key: &str) -> StoreResult<Option<(Vec<u8>, Meta)>> {
        (**self).get(key)
    }
    fn read_range(&self, key: &str, start: u64, end: u64, sink: &mut Sink<'_>) -> StoreResult<u64> {
        (**self).read_range(key, start, end, sink)
    }
    fn put(&self, key: &str, body: Vec<u8>, cond: Cond) -> StoreResult<Meta> {
        (**self).put(key, body, cond)
    }
    fn create_multipart(&self, key: &str) -> StoreResult<String> {
        (**self).create_multipart(key)
    }
    fn put_part(&self, key: &str, upload: &str, idx: usize, body: Vec<u8>) -> StoreResult<String> {
        (**self).put_part(key, upload, idx, body)
    }
    fn complete_multipart(&self, key: &str, upload: &str, parts: Vec<String>) -> StoreResult<Meta> {
        (**self).complete_multipart(key, upload, parts)
    }
    fn abort_multipart(&self, key: &str, upload: &str) -> StoreResult<()> {
        (**self).abort_multipart(key, upload)
    }
    fn delete(&self, key: &str) -> StoreResult<()> {
        (**self).delete(key)
    }
    fn list(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>> {
        (**self).list(prefix)
    }
}

/// Open the real bucket of a remote.
pub fn open(remote: &Remote) -> Result<Box<dyn Store>> {
    Ok(Box::new(S3::open(remote)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_cuts_signatures() {
        let s = scrub("GET /k?X-Amz-Signature=abcdef0123&X-Amz-Date=1 failed");
        assert!(!s.contains("abcdef0123"), "{s}");
        assert!(s.contains("X-Amz-Date=1"), "{s}");
    }

    #[test]
    fn memory_honours_conditions() {
        let m = Memory::default();
        let a = m.put("k", b"1".to_vec(), Cond::Create).unwrap();
        assert!(matches!(
            m.put("k", b"2".to_vec(), Cond::Create),
            Err(StoreError::Conflict(_))
        ));
        let b = m
            .put("k", b"2".to_vec(), Cond::IfMatch(a.etag.clone().unwrap()))
            .unwrap();
        assert!(matches!(
            m.put("k", b"3".to_vec(), Cond::IfMatch(a.etag.unwrap())),
            Err(StoreError::Conflict(_))
        ));
        assert_ne!(b.etag, None);
    }
}
