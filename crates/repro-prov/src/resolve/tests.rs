//! `components` on fixture trees (a fake dpkg database, a site-packages, a Cargo registry, node_modules, a Go
//! module cache), on hostile input, and on this host's real databases.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use md5::{Digest as _, Md5};
use repro_model::manifest::AccessKind;
use repro_model::provenance::{Check, Component, ComponentKind, UsedFile};
use sha2::Sha256;

use super::*;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn used(path: &str, data: &[u8]) -> UsedFile {
    UsedFile {
        path: path.into(),
        path_hex: None,
        uses: vec![AccessKind::Open],
        size: data.len() as u64,
        sha256: hex(&Sha256::digest(data)),
        blake3: blake3::hash(data).to_hex().to_string(),
        sha1: None,
    }
}

/// The bytes the guest saw, by path.
#[derive(Default)]
struct Seen(HashMap<String, Vec<u8>>);

impl Contents for Seen {
    fn bytes(&self, file: &UsedFile) -> Option<Vec<u8>> {
        self.0.get(&file.path).cloned()
    }
}

struct NoBytes;

impl Contents for NoBytes {
    fn bytes(&self, _: &UsedFile) -> Option<Vec<u8>> {
        None
    }
}

fn write(root: &Path, rel: &str, data: &[u8]) {
    let p = root.join(rel.trim_start_matches('/'));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, data).unwrap();
}

fn symlink(root: &Path, rel: &str, target: &str) {
    let p = root.join(rel.trim_start_matches('/'));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, p).unwrap();
}

fn md5_hex(b: &[u8]) -> String {
    hex(&Md5::digest(b))
}

/// The component a path landed in, and the file's check.
fn find<'a>(cs: &'a [Component], path: &str) -> (&'a Component, Check) {
    let mut hits = cs.iter().flat_map(|c| c.files.iter().filter(|f| f.path == path).map(move |f| (c, f.check)));
    let hit = hits.next().unwrap_or_else(|| panic!("{path} is in no component"));
    assert!(hits.next().is_none(), "{path} is in two components");
    hit
}

/// A Debian-like root: usrmerge links, bash (a binary, a conffile), libc6 for two architectures, a diversion,
/// a package whose status is not installed.
fn debian_root(root: &Path) {
    symlink(root, "/bin", "usr/bin");
    symlink(root, "/lib", "usr/lib");
    symlink(root, "/lib64", "/usr/lib64");
    write(root, "/usr/bin/bash", b"bash binary");
    write(root, "/etc/bash.bashrc", b"conffile");
    write(root, "/usr/lib/x86_64-linux-gnu/libc.so.6", b"libc amd64");
    write(root, "/usr/lib/i386-linux-gnu/libc.so.6", b"libc i386");
    write(root, "/usr/lib64/ld-linux-x86-64.so.2", b"ld.so");
    write(root, "/usr/bin/x", b"diverter's x");
    write(root, "/usr/bin/x.distrib", b"original x");
    let info = "/var/lib/dpkg/info";
    // dpkg lists bash under /bin (usrmerge moved it, the package did not).
    write(root, &format!("{info}/bash.list"), b"/.\n/bin\n/bin/bash\n/etc\n/etc/bash.bashrc\n");
    write(root, &format!("{info}/bash.md5sums"), format!("{}  bin/bash\n", md5_hex(b"bash binary")).as_bytes());
    write(root, &format!("{info}/bash.conffiles"), b"/etc/bash.bashrc\n");
    // libc6 lists /lib/...; ld.so under /lib64.
    write(root, &format!("{info}/libc6:amd64.list"), b"/lib/x86_64-linux-gnu/libc.so.6\n/lib64/ld-linux-x86-64.so.2\n");
    write(
        root,
        &format!("{info}/libc6:amd64.md5sums"),
        format!("{}  lib/x86_64-linux-gnu/libc.so.6\n", md5_hex(b"libc amd64")).as_bytes(),
    );
    write(root, &format!("{info}/libc6:i386.list"), b"/lib/i386-linux-gnu/libc.so.6\n");
    write(
        root,
        &format!("{info}/libc6:i386.md5sums"),
        format!("{}  lib/i386-linux-gnu/libc.so.6\n", md5_hex(b"libc i386")).as_bytes(),
    );
    // x: orig lists /usr/bin/x (moved to x.distrib by the diversion), div lists /usr/bin/x too (its own).
    write(root, &format!("{info}/orig.list"), b"/usr/bin/x\n");
    write(root, &format!("{info}/orig.md5sums"), format!("{}  usr/bin/x\n", md5_hex(b"original x")).as_bytes());
    write(root, &format!("{info}/div.list"), b"/usr/bin/x\n");
    write(root, &format!("{info}/div.md5sums"), format!("{}  usr/bin/x\n", md5_hex(b"diverter's x")).as_bytes());
    write(root, "/var/lib/dpkg/diversions", b"/usr/bin/x\n/usr/bin/x.distrib\ndiv\n");
    write(root, &format!("{info}/libpython3.11-stdlib:amd64.list"), b"/usr/lib/python3.11/os.py\n");
    write(root, "/usr/lib/python3.11/__pycache__/os.cpython-311.pyc", b"pyc");
    write(root, &format!("{info}/gone.list"), b"/usr/bin/gone\n");
    write(root, "/usr/bin/gone", b"gone");
    write(
        root,
        "/var/lib/dpkg/status",
        b"Package: bash\nStatus: install ok installed\nArchitecture: amd64\nVersion: 5.2.15-2+b2\n\n\
          Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nMulti-Arch: same\nVersion: 2.36-9+deb12u4\n\n\
          Package: libc6\nStatus: install ok installed\nArchitecture: i386\nMulti-Arch: same\nVersion: 2.36-9+deb12u4\n\n\
          Package: orig\nStatus: install ok installed\nArchitecture: all\nVersion: 1:1.0\n\n\
          Package: div\nStatus: hold ok installed\nArchitecture: all\nVersion: 2\n\n\
          Package: gone\nStatus: deinstall ok config-files\nArchitecture: all\nVersion: 1\n\n\
          Package: libpython3.11-stdlib\nStatus: install ok installed\nArchitecture: amd64\nVersion: 3.11.2-6\n",
    );
    write(root, "/etc/os-release", b"PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\nVERSION_ID=\"12\"\n");
}

#[test]
fn dpkg_owners_usrmerge_and_checks() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    debian_root(root);
    let files = vec![
        used("/usr/bin/bash", b"bash binary"),
        used("/bin/bash", b"bash binary"),
        used("/etc/bash.bashrc", b"conffile"),
        used("/usr/lib/x86_64-linux-gnu/libc.so.6", b"libc amd64"),
        used("/lib/i386-linux-gnu/libc.so.6", b"libc i386 edited"),
        used("/lib64/ld-linux-x86-64.so.2", b"ld.so"),
        used("/usr/bin/x", b"diverter's x"),
        used("/usr/bin/x.distrib", b"original x"),
        used("/usr/bin/gone", b"gone"),
        used("/usr/lib/python3.11/__pycache__/os.cpython-311.pyc", b"pyc"),
        // Through a `..` and the /bin link: /bin/../lib/... is /usr/lib/... in the root.
        used("/bin/../lib/x86_64-linux-gnu/libc.so.6", b"libc amd64"),
    ];
    let mut seen = Seen::default();
    for (f, data) in files.iter().zip([
        b"bash binary".as_slice(),
        b"bash binary",
        b"conffile",
        b"libc amd64",
        b"libc i386 edited",
        b"ld.so",
        b"diverter's x",
        b"original x",
        b"gone",
        b"pyc",
        b"libc amd64",
    ]) {
        seen.0.insert(f.path.clone(), data.to_vec());
    }
    let cs = components(root, &files, &seen).unwrap();

    let (bash, check) = find(&cs, "/usr/bin/bash");
    assert_eq!(
        (bash.kind, bash.name.as_str(), bash.version.as_deref()),
        (ComponentKind::Deb, "bash", Some("5.2.15-2+b2"))
    );
    assert_eq!(bash.purl.as_deref(), Some("pkg:deb/debian/bash@5.2.15-2%2Bb2?arch=amd64&distro=debian-12"));
    assert_eq!(check, Check::Matches);
    assert_eq!(find(&cs, "/bin/bash"), (bash, Check::Matches));
    assert_eq!(find(&cs, "/etc/bash.bashrc"), (bash, Check::NotRecorded));
    assert_eq!(bash.files.len(), 3);
    assert_eq!(
        bash.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(),
        ["/bin/bash", "/etc/bash.bashrc", "/usr/bin/bash"]
    );

    let (libc, check) = find(&cs, "/usr/lib/x86_64-linux-gnu/libc.so.6");
    assert_eq!(libc.purl.as_deref(), Some("pkg:deb/debian/libc6@2.36-9%2Bdeb12u4?arch=amd64&distro=debian-12"));
    assert_eq!(check, Check::Matches);
    assert_eq!(find(&cs, "/lib64/ld-linux-x86-64.so.2"), (libc, Check::NotRecorded));
    assert_eq!(find(&cs, "/bin/../lib/x86_64-linux-gnu/libc.so.6"), (libc, Check::Matches));
    let (libc32, check) = find(&cs, "/lib/i386-linux-gnu/libc.so.6");
    assert_eq!(libc32.purl.as_deref(), Some("pkg:deb/debian/libc6@2.36-9%2Bdeb12u4?arch=i386&distro=debian-12"));
    assert_eq!(check, Check::Modified);

    let (div, check) = find(&cs, "/usr/bin/x");
    assert_eq!((div.name.as_str(), check), ("div", Check::Matches));
    let (orig, check) = find(&cs, "/usr/bin/x.distrib");
    assert_eq!((orig.name.as_str(), check), ("orig", Check::Matches));
    assert_eq!(orig.purl.as_deref(), Some("pkg:deb/debian/orig@1%3A1.0?arch=all&distro=debian-12"));

    // A compiled module no package lists: its source's package, nothing recorded.
    let (stdlib, check) = find(&cs, "/usr/lib/python3.11/__pycache__/os.cpython-311.pyc");
    assert_eq!((stdlib.name.as_str(), check), ("libpython3.11-stdlib", Check::NotRecorded));

    // Not installed: no owner.
    let (gone, _) = find(&cs, "/usr/bin/gone");
    assert_eq!((gone.kind, gone.name.as_str(), gone.purl.as_deref()), (ComponentKind::File, "/usr/bin/gone", None));

    // Sorted by (kind, name, version); each digest is that of its files.
    let keys: Vec<_> = cs.iter().map(|c| (c.kind, c.name.clone(), c.version.clone())).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    for c in &cs {
        assert_eq!(c.digest, crate::identity::component_digest(&c.files));
    }

    // Without bytes, what md5sums records cannot be checked; a conffile is still not recorded.
    let cs = components(root, &files, &NoBytes).unwrap();
    assert_eq!(find(&cs, "/usr/bin/bash").1, Check::Unknown);
    assert_eq!(find(&cs, "/etc/bash.bashrc").1, Check::NotRecorded);
}

#[test]
fn dpkg_os_release_and_missing_databases() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let files = vec![used("/usr/bin/tool", b"t")];
    // No database at all: a loose file.
    let cs = components(root, &files, &NoBytes).unwrap();
    assert_eq!(cs.len(), 1);
    assert_eq!(
        (cs[0].kind, cs[0].name.as_str(), cs[0].version.as_deref()),
        (ComponentKind::File, "/usr/bin/tool", None)
    );
    // An ubuntu without VERSION_ID (and no status file: nothing is installed).
    write(root, "/var/lib/dpkg/info/tool.list", b"/usr/bin/tool\n");
    let cs = components(root, &files, &NoBytes).unwrap();
    assert_eq!(cs[0].kind, ComponentKind::File);
    write(
        root,
        "/var/lib/dpkg/status",
        b"Package: tool\nStatus: install ok installed\nArchitecture: arm64\nVersion: 1.0~rc1\n",
    );
    write(root, "/usr/lib/os-release", b"ID='Ubuntu'\n");
    let cs = components(root, &files, &NoBytes).unwrap();
    assert_eq!(cs[0].purl.as_deref(), Some("pkg:deb/ubuntu/tool@1.0~rc1?arch=arm64"));
    assert_eq!(cs[0].files[0].check, Check::NotRecorded);
}

#[test]
fn dpkg_database_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "/var/lib/dpkg/info/tool.list", b"/usr/bin/tool\n");
    let status = root.join("var/lib/dpkg/status");
    let big = std::fs::File::create(&status).unwrap();
    big.set_len(dpkg::MAX_STATUS + 1).unwrap();
    let err = components(root, &[used("/usr/bin/tool", b"t")], &NoBytes).unwrap_err();
    assert!(matches!(&err, ProvError::TooLarge { path, .. } if path == &status), "{err}");
    // A database that is a directory is no database (not an error); one that is there but unreadable is.
    std::fs::remove_file(&status).unwrap();
    std::fs::create_dir(&status).unwrap();
    assert_eq!(components(root, &[used("/usr/bin/tool", b"t")], &NoBytes).unwrap()[0].kind, ComponentKind::File);
}

#[test]
fn dpkg_links_stay_inside_the_root() {
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "/var/lib/dpkg/info/evil.list", b"/x/tool\n");
    write(outside.path(), "/var/lib/dpkg/status", b"Package: evil\nStatus: install ok installed\nVersion: 1\n");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // /var points outside the root on the host: within the root, it is /<outside>/var, which is not there.
    symlink(root, "/var", &outside.path().join("var").display().to_string());
    // A loop, and a link that climbs: both stay within the root.
    symlink(root, "/loop/a", "b");
    symlink(root, "/loop/b", "a");
    symlink(root, "/up", "../../../../..");
    let files = vec![used("/x/tool", b"t"), used("/loop/a/f", b"f"), used("/up/etc/passwd", b"p")];
    let cs = components(root, &files, &NoBytes).unwrap();
    assert!(cs.iter().all(|c| c.kind == ComponentKind::File), "{cs:?}");
    let fs = RootFs::new(root);
    assert_eq!(fs.canonical(b"/up/etc/passwd", true).as_deref(), Some(b"/etc/passwd".as_slice()));
    assert_eq!(fs.canonical(b"/loop/a/f", true), None);
    assert_eq!(fs.canonical(b"/../../a/./b//c/..", false).as_deref(), Some(b"/a/b".as_slice()));
    assert_eq!(fs.host(b"/up"), Some(root.to_path_buf()));
}

/// A site-packages with a wheel's dist-info (a script in bin, a .pyc without hash, a modified file), a second
/// dist whose RECORD is broken CSV, and an egg-info.
fn python_root(root: &Path) -> Vec<UsedFile> {
    let site = "/venv/lib/python3.11/site-packages";
    write(root, &format!("{site}/yaml/__init__.py"), b"import yaml");
    write(root, &format!("{site}/yaml/__pycache__/__init__.cpython-311.pyc"), b"pyc");
    write(root, &format!("{site}/yaml/edited.py"), b"edited");
    write(root, "/venv/bin/yamlcli", b"#!python");
    write(root, &format!("{site}/yaml/__pycache__/edited.cpython-311.opt-1.pyc"), b"unlisted pyc");
    let b64 = |d: &[u8]| {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(d))
    };
    let record = format!(
        "yaml/__init__.py,sha256={},11\n\"yaml/__pycache__/__init__.cpython-311.pyc\",,\nyaml/edited.py,sha256={},6\n\
         ../../../bin/yamlcli,sha256={},8\nPyYAML-6.0.dist-info/RECORD,,\n",
        b64(b"import yaml"),
        b64(b"original"),
        b64(b"#!python")
    );
    write(root, &format!("{site}/PyYAML-6.0.dist-info/RECORD"), record.as_bytes());
    write(
        root,
        &format!("{site}/PyYAML-6.0.dist-info/METADATA"),
        b"Metadata-Version: 2.1\nName: PyYAML\nVersion: 6.0.1+local\n\nName: not-this\n",
    );
    write(root, &format!("{site}/broken/mod.py"), b"b");
    write(root, &format!("{site}/broken-1.0.dist-info/RECORD"), b"\"broken/mod.py,sha256=x\n");
    write(root, &format!("{site}/nometa/m.py"), b"m");
    write(root, &format!("{site}/No.Meta_Dist-2.0.dist-info/RECORD"), b"nometa/m.py,sha256=notbase64!,1\n");
    write(root, &format!("{site}/eggy/__init__.py"), b"egg");
    write(root, &format!("{site}/Eggy-0.3-py3.11.egg-info/installed-files.txt"), b"../eggy/__init__.py\nPKG-INFO\n");
    write(root, &format!("{site}/Eggy-0.3-py3.11.egg-info/PKG-INFO"), b"Name: Eggy\nVersion: 0.3\n");
    vec![
        used(&format!("{site}/yaml/__init__.py"), b"import yaml"),
        used(&format!("{site}/yaml/__pycache__/__init__.cpython-311.pyc"), b"pyc"),
        used(&format!("{site}/yaml/edited.py"), b"edited"),
        used("/venv/bin/yamlcli", b"#!python"),
        used(&format!("{site}/broken/mod.py"), b"b"),
        used(&format!("{site}/nometa/m.py"), b"m"),
        used(&format!("{site}/eggy/__init__.py"), b"egg"),
        used(&format!("{site}/yaml/__pycache__/edited.cpython-311.opt-1.pyc"), b"unlisted pyc"),
        used(&format!("{site}/yaml/__pycache__/gone.cpython-311.pyc"), b"no source listed"),
    ]
}

#[test]
fn python_record_and_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let files = python_root(root);
    let site = "/venv/lib/python3.11/site-packages";
    let cs = components(root, &files, &NoBytes).unwrap();
    let (yaml, check) = find(&cs, &format!("{site}/yaml/__init__.py"));
    assert_eq!(
        (yaml.kind, yaml.name.as_str(), yaml.version.as_deref()),
        (ComponentKind::Python, "pyyaml", Some("6.0.1+local"))
    );
    assert_eq!(yaml.purl.as_deref(), Some("pkg:pypi/pyyaml@6.0.1%2Blocal"));
    assert_eq!(check, Check::Matches);
    assert_eq!(find(&cs, &format!("{site}/yaml/__pycache__/__init__.cpython-311.pyc")), (yaml, Check::NotRecorded));
    assert_eq!(find(&cs, &format!("{site}/yaml/edited.py")), (yaml, Check::Modified));
    assert_eq!(find(&cs, "/venv/bin/yamlcli"), (yaml, Check::Matches));
    assert_eq!(find(&cs, &format!("{site}/yaml/__pycache__/edited.cpython-311.opt-1.pyc")), (yaml, Check::NotRecorded));
    assert_eq!(find(&cs, &format!("{site}/yaml/__pycache__/gone.cpython-311.pyc")).0.kind, ComponentKind::File);
    assert_eq!(find(&cs, &format!("{site}/broken/mod.py")).0.kind, ComponentKind::File);
    // No METADATA: the directory's name; a hash that does not decode is not a record.
    let (nometa, check) = find(&cs, &format!("{site}/nometa/m.py"));
    assert_eq!(
        (nometa.name.as_str(), nometa.version.as_deref(), check),
        ("no-meta-dist", Some("2.0"), Check::NotRecorded)
    );
    let (egg, check) = find(&cs, &format!("{site}/eggy/__init__.py"));
    assert_eq!(
        (egg.kind, egg.name.as_str(), egg.version.as_deref(), check),
        (ComponentKind::Python, "eggy", Some("0.3"), Check::NotRecorded)
    );
}

#[test]
fn dpkg_comes_before_python() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let files = python_root(root);
    let init = "/venv/lib/python3.11/site-packages/yaml/__init__.py";
    write(root, "/var/lib/dpkg/info/python3-yaml.list", format!("{init}\n").as_bytes());
    write(
        root,
        "/var/lib/dpkg/status",
        b"Package: python3-yaml\nStatus: install ok installed\nArchitecture: amd64\nVersion: 6.0-3\n",
    );
    let cs = components(root, &files, &NoBytes).unwrap();
    assert_eq!(find(&cs, init).0.name, "python3-yaml");
    assert_eq!(find(&cs, "/venv/lib/python3.11/site-packages/yaml/edited.py").0.name, "pyyaml");
}

#[test]
fn cargo_npm_golang_and_loose() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let reg = "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f";
    write(root, &format!("{reg}/proc-macro2-1.0.86/src/lib.rs"), b"pm2");
    write(root, "/app/node_modules/left-pad/package.json", br#"{"name":"left-pad","version":"1.3.0"}"#);
    write(root, "/app/node_modules/left-pad/index.js", b"lp");
    write(root, "/app/node_modules/@babel/core/package.json", br#"{"name":"@babel/core","version":"7.24.0+b"}"#);
    write(root, "/app/node_modules/@babel/core/node_modules/ms/package.json", br#"{"name":"ms","version":"2.1.3"}"#);
    write(root, "/app/node_modules/bad/package.json", b"{not json");
    write(root, "/app/node_modules/noversion/package.json", b"{}");
    let files = vec![
        used(&format!("{reg}/proc-macro2-1.0.86/src/lib.rs"), b"pm2"),
        used("/app/node_modules/left-pad/index.js", b"lp"),
        used("/app/node_modules/left-pad/package.json", br#"{"name":"left-pad","version":"1.3.0"}"#),
        used("/app/node_modules/@babel/core/lib/index.js", b"bc"),
        used("/app/node_modules/@babel/core/node_modules/ms/index.js", b"ms"),
        used("/app/node_modules/bad/index.js", b"bad"),
        used("/app/node_modules/.bin/tool", b"bin"),
        used("/app/node_modules/noversion/x.js", b"nv"),
        used("/root/go/pkg/mod/github.com/!burnt!sushi/toml@v1.3.2/decode.go", b"go"),
        used("/root/go/pkg/mod/cache/download/x/@v/list", b"cache"),
        used("/etc/ssl/certs/ca-certificates.crt", b"certs"),
    ];
    let cs = components(root, &files, &NoBytes).unwrap();
    let (pm2, check) = find(&cs, &files[0].path);
    assert_eq!(
        (pm2.kind, pm2.name.as_str(), pm2.purl.as_deref(), check),
        (ComponentKind::Cargo, "proc-macro2", Some("pkg:cargo/proc-macro2@1.0.86"), Check::NotRecorded)
    );
    let (lp, _) = find(&cs, &files[1].path);
    assert_eq!((lp.kind, lp.purl.as_deref(), lp.files.len()), (ComponentKind::Npm, Some("pkg:npm/left-pad@1.3.0"), 2));
    let (babel, _) = find(&cs, &files[3].path);
    assert_eq!((babel.name.as_str(), babel.purl.as_deref()), ("@babel/core", Some("pkg:npm/%40babel/core@7.24.0%2Bb")));
    assert_eq!(find(&cs, &files[4].path).0.purl.as_deref(), Some("pkg:npm/ms@2.1.3"));
    assert_eq!(find(&cs, &files[5].path).0.kind, ComponentKind::File);
    assert_eq!(find(&cs, &files[6].path).0.kind, ComponentKind::File);
    let (nv, _) = find(&cs, &files[7].path);
    assert_eq!(
        (nv.name.as_str(), nv.version.as_deref(), nv.purl.as_deref()),
        ("noversion", None, Some("pkg:npm/noversion"))
    );
    let (toml, check) = find(&cs, &files[8].path);
    assert_eq!(
        (toml.kind, toml.name.as_str(), toml.purl.as_deref(), check),
        (
            ComponentKind::Golang,
            "github.com/BurntSushi/toml",
            Some("pkg:golang/github.com/BurntSushi/toml@v1.3.2"),
            Check::NotRecorded
        )
    );
    assert_eq!(find(&cs, &files[9].path).0.kind, ComponentKind::File);
    let (loose, check) = find(&cs, &files[10].path);
    assert_eq!(
        (loose.kind, loose.name.as_str(), loose.version.as_deref(), loose.purl.as_deref(), check),
        (ComponentKind::File, "/etc/ssl/certs/ca-certificates.crt", None, None, Check::NotRecorded)
    );
    assert_eq!(cs.len(), 10);
    assert!(cs.windows(2).all(|w| (w[0].kind, &w[0].name, &w[0].version) <= (w[1].kind, &w[1].name, &w[1].version)));
}

#[test]
fn hostile_paths_are_loose_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    debian_root(root);
    let long = format!("/{}", "a/".repeat(20_000));
    let mut odd = used("/usr/bin/\u{fffd}", b"x");
    odd.path_hex = Some(hex(b"/usr/bin/\xff"));
    let mut badhex = used("/usr/bin/bash", b"bash binary");
    badhex.path_hex = Some("zz".into());
    let files = vec![
        used("relative/path", b"r"),
        used("", b"e"),
        used("/usr/bin/ba\0sh", b"n"),
        used(&long, b"l"),
        odd,
        badhex,
        used("/", b"/"),
        used("/..", b".."),
    ];
    let cs = components(root, &files, &NoBytes).unwrap();
    assert_eq!(cs.iter().map(|c| c.files.len()).sum::<usize>(), files.len());
    assert!(cs.iter().all(|c| c.kind == ComponentKind::File), "{cs:?}");
}

#[test]
fn non_utf8_paths_match_by_their_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "/var/lib/dpkg/info/odd.list", b"/usr/share/odd/\xff.txt\n");
    write(root, "/var/lib/dpkg/status", b"Package: odd\nStatus: install ok installed\nArchitecture: all\nVersion: 1\n");
    let mut f = used("/usr/share/odd/\u{fffd}.txt", b"x");
    f.path_hex = Some(hex(b"/usr/share/odd/\xff.txt"));
    let cs = components(root, &[f], &NoBytes).unwrap();
    assert_eq!(cs[0].name, "odd");
    assert_eq!(cs[0].files[0].path, "/usr/share/odd/\u{fffd}.txt");
}

#[test]
fn malformed_databases_yield_no_match() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "/var/lib/dpkg/info/x.list", b"\xff\xfe\n\n\n/usr/bin/x");
    write(root, "/var/lib/dpkg/info/x.md5sums", b"garbage\n\x00\x01\nzzzz  usr/bin/x\n");
    write(root, "/var/lib/dpkg/info/:.list", b"/usr/bin/x\n");
    write(
        root,
        "/var/lib/dpkg/status",
        b"\n\n\nPackage x\nPackage: x\nStatus: install ok installed\nVersion: 1 2\n\n\xff",
    );
    write(root, "/var/lib/dpkg/diversions", b"/usr/bin/x\n");
    write(root, "/etc/os-release", b"ID=\"a b/c\"\nVERSION_ID=\xff\n");
    let site = "/s/site-packages";
    write(root, &format!("{site}/d-1.dist-info/RECORD"), b"\x00,\n,,,,,\n\"\"\"\n");
    write(root, &format!("{site}/d-1.dist-info/METADATA"), b"\xff\xff");
    std::fs::create_dir_all(root.join("s/site-packages/e-1.dist-info/RECORD")).unwrap();
    let files = vec![used("/usr/bin/x", b"x"), used(&format!("{site}/m.py"), b"m")];
    let cs = components(root, &files, &NoBytes).unwrap();
    // x's version is not a version: x is not installed.
    assert!(cs.iter().all(|c| c.kind == ComponentKind::File), "{cs:?}");
}

#[test]
fn duplicates_and_empty_input() {
    let dir = tempfile::tempdir().unwrap();
    assert!(components(dir.path(), &[], &NoBytes).unwrap().is_empty());
    let files = vec![used("/a", b"1"), used("/a", b"1")];
    let cs = components(dir.path(), &files, &NoBytes).unwrap();
    assert_eq!(cs.len(), 1);
    assert_eq!(cs[0].files.len(), 2);
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config { cases: 64, ..Default::default() })]

    /// Whatever the paths, `components` does not fail on a sane root, and puts every input file in exactly one
    /// component, sorted, with the digest of its files.
    #[test]
    fn every_file_in_exactly_one_component(
        paths in proptest::collection::vec(
            proptest::collection::vec(
                proptest::sample::select(vec![
                    "", ".", "..", "usr", "bin", "lib", "lib64", "x86_64-linux-gnu", "libc.so.6", "bash", "etc",
                    "site-packages", "dist-packages", "venv", "yaml", "__init__.py", "PyYAML-6.0.dist-info",
                    "RECORD", "node_modules", "@babel", "core", "left-pad", "index.js", "package.json", "registry",
                    "src", "index", "serde-1.0.0", "lib.rs", "pkg", "mod", "cache", "!burnt!sushi", "toml@v1.0.0",
                    "x@", "@v", "!", "\u{fffd}", "a-1-2-3", "loop",
                ]),
                0..8,
            ),
            0..12,
        ),
        absolute in proptest::collection::vec(proptest::bool::ANY, 12),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        debian_root(root);
        python_root(root);
        symlink(root, "/loop", "loop");
        let files: Vec<UsedFile> = paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let lead = if absolute[i] { "/" } else { "" };
                used(&format!("{lead}{}", p.join("/")), format!("content {i}").as_bytes())
            })
            .collect();
        let cs = components(root, &files, &NoBytes).unwrap();
        let mut got: Vec<(String, String)> =
            cs.iter().flat_map(|c| c.files.iter().map(|f| (f.path.clone(), f.sha256.clone()))).collect();
        let mut want: Vec<(String, String)> = files.iter().map(|f| (f.path.clone(), f.sha256.clone())).collect();
        got.sort();
        want.sort();
        proptest::prop_assert_eq!(got, want);
        for c in &cs {
            proptest::prop_assert_eq!(&c.digest, &crate::identity::component_digest(&c.files));
            proptest::prop_assert!(c.files.windows(2).all(|w| w[0].path <= w[1].path));
        }
        proptest::prop_assert!(cs.windows(2).all(|w| (w[0].kind, &w[0].name, &w[0].version) <= (w[1].kind, &w[1].name, &w[1].version)));
    }
}

// --- This host's real databases (Debian 12 here); each test says why it skips elsewhere. ---

/// `dpkg-query -W -f=FORMAT PACKAGE`, when dpkg is there.
fn dpkg_query(format: &str, package: &str) -> Option<String> {
    let out = std::process::Command::new("dpkg-query").args(["-W", "-f", format, package]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn real(path: &str) -> Option<(UsedFile, Vec<u8>)> {
    let data = std::fs::read(path).ok()?;
    Some((used(path, &data), data))
}

#[test]
fn host_bash_and_libc6() {
    let Some(version) = dpkg_query("${Version}", "bash") else {
        eprintln!("skipped: no dpkg-query or no bash package on this host");
        return;
    };
    let arch = dpkg_query("${Architecture}", "libc6").unwrap_or_default();
    let libc_version = dpkg_query("${Version}", "libc6").unwrap_or_default();
    let libc = dpkg_query("${db-fsys:Files}", "libc6")
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .find(|l| l.ends_with("/libc.so.6") && !l.contains("/usr/share/"))
        .map(str::to_string);
    let Some(((bash_bin, bash_bytes), (usr_bash, _))) = real("/bin/bash").zip(real("/usr/bin/bash")) else {
        eprintln!("skipped: no /bin/bash and /usr/bin/bash");
        return;
    };
    let mut files = vec![bash_bin.clone(), usr_bash.clone()];
    let mut seen = Seen::default();
    seen.0.insert(bash_bin.path.clone(), bash_bytes.clone());
    seen.0.insert(usr_bash.path.clone(), bash_bytes.clone());
    let mut libc_paths = Vec::new();
    if let Some(l) = &libc {
        // As dpkg lists it, and its usrmerge alias.
        for p in [l.clone(), String::from_utf8(dpkg::usrmerge_alias(l.as_bytes()).unwrap_or_default()).unwrap()] {
            if let Some((f, data)) = real(&p) {
                seen.0.insert(f.path.clone(), data);
                libc_paths.push(f.path.clone());
                files.push(f);
            }
        }
    }
    let start = Instant::now();
    let cs = components(Path::new("/"), &files, &seen).unwrap();
    let took = start.elapsed();
    eprintln!("components of {} files against /var/lib/dpkg: {took:?}", files.len());
    for p in ["/bin/bash", "/usr/bin/bash"] {
        let (c, check) = find(&cs, p);
        assert_eq!(
            (c.kind, c.name.as_str(), c.version.as_deref()),
            (ComponentKind::Deb, "bash", Some(version.as_str()))
        );
        assert_eq!(check, Check::Matches, "{p}");
        let arch = dpkg_query("${Architecture}", "bash").unwrap_or_default();
        assert!(c.purl.as_deref().unwrap().starts_with("pkg:deb/"), "{:?}", c.purl);
        assert!(
            c.purl.as_deref().unwrap().contains(&format!("@{}?arch={arch}", purl::encode(&version))),
            "{:?}",
            c.purl
        );
    }
    // As listed, and (on a usrmerged system) by its alias.
    assert!(libc.is_none() || !libc_paths.is_empty());
    for p in &libc_paths {
        let (c, check) = find(&cs, p);
        assert_eq!(
            (c.name.as_str(), c.version.as_deref(), check),
            ("libc6", Some(libc_version.as_str()), Check::Matches),
            "{p}"
        );
        assert!(c.purl.as_deref().unwrap().contains(&format!("arch={arch}")));
    }
    // The same bytes altered: modified.
    let mut altered = bash_bytes;
    altered[0] ^= 1;
    seen.0.insert(bash_bin.path.clone(), altered);
    let cs = components(Path::new("/"), &files, &seen).unwrap();
    assert_eq!(find(&cs, "/bin/bash").1, Check::Modified);
    assert_eq!(find(&cs, "/usr/bin/bash").1, Check::Matches);
    // A generous bound (a debug build on a loaded machine): the point is one pass, not one per file.
    assert!(took.as_millis() < 2000, "{took:?}");
}

#[test]
fn host_dpkg_index_time() {
    if !Path::new("/var/lib/dpkg/info").is_dir() {
        eprintln!("skipped: no /var/lib/dpkg");
        return;
    }
    // Many used files: the owner of each found in the one pass over the .list files.
    let files: Vec<UsedFile> = std::fs::read_dir("/usr/bin")
        .unwrap()
        .filter_map(|e| e.ok())
        .take(500)
        .map(|e| used(&e.path().display().to_string(), b""))
        .collect();
    let mut times = Vec::new();
    let mut owned = 0;
    for _ in 0..3 {
        let start = Instant::now();
        let cs = components(Path::new("/"), &files, &NoBytes).unwrap();
        times.push(start.elapsed());
        owned = cs.iter().filter(|c| c.kind == ComponentKind::Deb).map(|c| c.files.len()).sum::<usize>();
    }
    let lists = std::fs::read_dir("/var/lib/dpkg/info")
        .unwrap()
        .filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".list")))
        .count();
    // The index alone: one pass over every .list file.
    let wanted: std::collections::HashSet<Vec<u8>> = files
        .iter()
        .flat_map(|f| {
            let p = f.path.as_bytes().to_vec();
            let alias = dpkg::usrmerge_alias(&p);
            [Some(p), alias].into_iter().flatten()
        })
        .collect();
    let start = Instant::now();
    let index = dpkg::read_lists(Path::new("/var/lib/dpkg/info"), &wanted).unwrap();
    let index_time = start.elapsed();
    eprintln!(
        "{} files ({owned} owned by dpkg) against {lists} .list files: components {times:?}; index alone {index_time:?} \
         ({} paths found)",
        files.len(),
        index.owners.len()
    );
    assert!(owned > 0);
    assert_eq!(index.stems.len(), lists);
}

#[test]
fn host_diversion() {
    let Ok(div) = std::fs::read_to_string("/var/lib/dpkg/diversions") else {
        eprintln!("skipped: no /var/lib/dpkg/diversions");
        return;
    };
    let lines: Vec<&str> = div.lines().collect();
    let Some(t) = lines.chunks_exact(3).find(|t| t[2] != ":" && Path::new(t[0]).is_file() && Path::new(t[1]).is_file())
    else {
        eprintln!("skipped: no package diversion with both files on this host");
        return;
    };
    let (Some((from, from_bytes)), Some((to, to_bytes))) = (real(t[0]), real(t[1])) else { return };
    let mut seen = Seen::default();
    seen.0.insert(from.path.clone(), from_bytes);
    seen.0.insert(to.path.clone(), to_bytes);
    let cs = components(Path::new("/"), &[from.clone(), to.clone()], &seen).unwrap();
    let (c, check) = find(&cs, &from.path);
    assert_eq!((c.kind, c.name.as_str(), check), (ComponentKind::Deb, t[2], Check::Matches), "{}", from.path);
    let (c, check) = find(&cs, &to.path);
    assert_eq!(c.kind, ComponentKind::Deb);
    assert_ne!(c.name, t[2]);
    assert_eq!(check, Check::Matches, "{} in {}", to.path, c.name);
}

#[test]
fn host_python() {
    // A dpkg-owned module resolves to its Debian package, not to its dist-info.
    let yaml = "/usr/lib/python3/dist-packages/yaml/__init__.py";
    if let (Some(pkg), Some((f, data))) = (dpkg_owner(yaml), real(yaml)) {
        let mut seen = Seen::default();
        seen.0.insert(f.path.clone(), data);
        let cs = components(Path::new("/"), &[f], &seen).unwrap();
        assert_eq!(
            (cs[0].kind, cs[0].name.as_str(), cs[0].files[0].check),
            (ComponentKind::Deb, pkg.as_str(), Check::Matches)
        );
    } else {
        eprintln!("skipped: no dpkg-owned {yaml}");
    }
    // A compiled standard-library module: no package lists it; its source's package owns it.
    let os_py = "/usr/lib/python3.11/os.py";
    let pyc = "/usr/lib/python3.11/__pycache__/os.cpython-311.pyc";
    if let (Some(pkg), Some((f, _))) = (dpkg_owner(os_py), real(pyc)) {
        let cs = components(Path::new("/"), &[f], &NoBytes).unwrap();
        assert_eq!(
            (cs[0].kind, cs[0].name.as_str(), cs[0].files[0].check),
            (ComponentKind::Deb, pkg.as_str(), Check::NotRecorded)
        );
    } else {
        eprintln!("skipped: no dpkg-owned {os_py} with {pyc}");
    }
    // A pip-installed distribution (pyenv's site-packages here): found by its RECORD, and it matches.
    let Some((site, dist)) = pip_dist() else {
        eprintln!("skipped: no pip-installed distribution outside dpkg on this host");
        return;
    };
    let record = std::fs::read(site.join(&dist).join("RECORD")).unwrap();
    let (rel, _) = python::csv_records(&record)
        .into_iter()
        .filter(|r| r.len() >= 2 && r[1].starts_with(b"sha256=") && r[0].ends_with(b".py") && !r[0].starts_with(b".."))
        .map(|r| (String::from_utf8_lossy(&r[0]).into_owned(), ()))
        .next()
        .expect("a .py in RECORD");
    let path = site.join(&rel).display().to_string();
    let (f, _) = real(&path).unwrap();
    let cs = components(Path::new("/"), &[f], &NoBytes).unwrap();
    let name = dist.trim_end_matches(".dist-info").split('-').next().unwrap();
    assert_eq!(
        (cs[0].kind, cs[0].name.as_str(), cs[0].files[0].check),
        (ComponentKind::Python, purl::pep503(name).as_str(), Check::Matches),
        "{path}"
    );
    eprintln!("{path}: {:?}", cs[0].purl);
}

fn dpkg_owner(path: &str) -> Option<String> {
    let out = std::process::Command::new("dpkg").args(["-S", path]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let pkg = text.lines().next()?.split(':').next()?.trim().to_string();
    (out.status.success() && !pkg.contains(' ')).then_some(pkg)
}

/// A site-packages directory outside dpkg's files with a dist-info that has a RECORD.
fn pip_dist() -> Option<(std::path::PathBuf, String)> {
    let mut sites = Vec::new();
    for base in ["/root/.pyenv/versions", "/usr/local/lib"] {
        let Ok(entries) = std::fs::read_dir(base) else { continue };
        for e in entries.flatten() {
            for lib in [e.path().join("lib"), e.path()] {
                let Ok(inner) = std::fs::read_dir(&lib) else { continue };
                for i in inner.flatten() {
                    for s in ["site-packages", "dist-packages"] {
                        let p = i.path().join(s);
                        if p.is_dir() {
                            sites.push(p);
                        }
                    }
                }
            }
        }
    }
    sites.sort();
    for site in sites {
        let mut dists: Vec<String> = std::fs::read_dir(&site)
            .ok()?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".dist-info"))
            .collect();
        dists.sort();
        if let Some(d) = dists.into_iter().find(|d| {
            site.join(d).join("RECORD").is_file()
                && dpkg_owner(&site.join(d).join("RECORD").display().to_string()).is_none()
        }) {
            return Some((site, d));
        }
    }
    None
}

#[test]
fn pyc_sources() {
    let src = |p: &str| pyc_source(p.as_bytes()).map(|s| String::from_utf8(s).unwrap());
    assert_eq!(src("/l/__pycache__/os.cpython-311.pyc").as_deref(), Some("/l/os.py"));
    assert_eq!(src("/l/p/__pycache__/__init__.cpython-311.opt-2.pyc").as_deref(), Some("/l/p/__init__.py"));
    assert_eq!(src("/l/mod.pyc").as_deref(), Some("/l/mod.py"));
    assert_eq!(src("/l/__pycache__/untagged.pyc"), None);
    assert_eq!(src("/l/__pycache__/.cpython-311.pyc"), None);
    assert_eq!(src("/l/a.b.pyc"), None);
    assert_eq!(src("/l/x.py"), None);
    assert_eq!(src("nopath.pyc"), None);
}

/// A `.crate`: a gzipped tar of `TOP/…` entries.
fn crate_archive(top: &str, entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
    for (rel, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, format!("{top}/{rel}"), *data).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

#[test]
fn crate_files_are_checked_against_their_archive_and_the_archive_against_cargo_lock() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let reg = "/home/u/.cargo/registry";
    let idx = "index.crates.io-1949cf8c6b5b557f";
    let src = format!("{reg}/src/{idx}/itoa-1.0.11");
    write(root, &format!("{src}/src/lib.rs"), b"pub fn itoa() {}\n");
    write(root, &format!("{src}/src/udiv128.rs"), b"edited after unpacking\n");
    write(root, &format!("{src}/build-extra.rs"), b"not in the archive\n");
    let archive = crate_archive(
        "itoa-1.0.11",
        &[("Cargo.toml", b"[package]\n"), ("src/lib.rs", b"pub fn itoa() {}\n"), ("src/udiv128.rs", b"original\n")],
    );
    write(root, &format!("{reg}/cache/{idx}/itoa-1.0.11.crate"), &archive);
    // A crate whose archive is not in the cache.
    let other = format!("{reg}/src/{idx}/ryu-1.0.18/src/lib.rs");
    write(root, &other, b"ryu");
    let files = vec![
        used(&format!("{src}/src/lib.rs"), b"pub fn itoa() {}\n"),
        used(&format!("{src}/src/udiv128.rs"), b"edited after unpacking\n"),
        used(&format!("{src}/build-extra.rs"), b"not in the archive\n"),
        used(&other, b"ryu"),
    ];
    let cs = components(root, &files, &NoBytes).unwrap();
    let (itoa, check) = find(&cs, &files[0].path);
    assert_eq!(check, Check::Matches);
    assert_eq!(itoa.archive_sha256.as_deref(), Some(hex(&Sha256::digest(&archive)).as_str()));
    assert_eq!(find(&cs, &files[1].path).1, Check::Modified);
    assert_eq!(find(&cs, &files[2].path).1, Check::NotRecorded);
    let (ryu, check) = find(&cs, &files[3].path);
    assert_eq!((ryu.archive_sha256.as_deref(), check), (None, Check::NotRecorded));

    // The working directory's Cargo.lock pins the archive: the same one, then another.
    let lock = |sum: &str| {
        format!("version = 4\n\n[[package]]\nname = \"itoa\"\nversion = \"1.0.11\"\nsource = \"registry+https://github.com/rust-lang/crates.io-index\"\nchecksum = \"{sum}\"\n\n[[package]]\nname = \"app\"\nversion = \"0.1.0\"\n")
    };
    write(root, "/work/Cargo.lock", lock(&hex(&Sha256::digest(&archive))).as_bytes());
    let cs = components_with(root, &files, &NoBytes, Some(b"/work/Cargo.lock")).unwrap();
    assert_eq!(find(&cs, &files[0].path).1, Check::Matches);
    write(root, "/work/Cargo.lock", lock(&"0".repeat(64)).as_bytes());
    let cs = components_with(root, &files, &NoBytes, Some(b"/work/Cargo.lock")).unwrap();
    assert_eq!(find(&cs, &files[0].path).1, Check::Modified, "an archive that is not the one Cargo.lock pins");
    // A Cargo.lock that is not TOML is no record: the archive check stands.
    write(root, "/work/Cargo.lock", b"[[package\nname=");
    let cs = components_with(root, &files, &NoBytes, Some(b"/work/Cargo.lock")).unwrap();
    assert_eq!(find(&cs, &files[0].path).1, Check::Matches);
}

#[test]
fn a_crate_archive_that_is_a_gzip_bomb_or_garbage_checks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let src = "/c/registry/src/i/bomb-1.0.0";
    write(root, &format!("{src}/src/lib.rs"), b"x");
    // 1 GiB of zeros after a tar header for the wanted file: unpacking stops at the limit.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    {
        use std::io::Write as _;
        let mut h = tar::Header::new_gnu();
        h.set_path("bomb-1.0.0/big").unwrap();
        h.set_size(1 << 30);
        h.set_cksum();
        gz.write_all(h.as_bytes()).unwrap();
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..1024 {
            gz.write_all(&zeros).unwrap();
        }
    }
    write(root, "/c/registry/cache/i/bomb-1.0.0.crate", &gz.finish().unwrap());
    let files = vec![used(&format!("{src}/src/lib.rs"), b"x")];
    let t = Instant::now();
    let cs = components(root, &files, &NoBytes).unwrap();
    assert!(t.elapsed().as_secs() < 30, "{:?}", t.elapsed());
    assert_eq!(find(&cs, &files[0].path).1, Check::NotRecorded);
    write(root, "/c/registry/cache/i/bomb-1.0.0.crate", b"not gzip at all");
    let cs = components(root, &files, &NoBytes).unwrap();
    assert_eq!(find(&cs, &files[0].path).1, Check::NotRecorded);
}
