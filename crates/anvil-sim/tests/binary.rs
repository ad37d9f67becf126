//! The `anvil-sim` binary as a person runs it: it says where it listens, serves until Ctrl-C
//! (exit 0), and refuses a flag it cannot use with a message and exit code 2.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

fn anvil_sim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_anvil-sim"))
}

#[test]
fn serves_until_ctrl_c() {
    let mut child = anvil_sim()
        .args(["--listen", "127.0.0.1:0", "--profile", "fast"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("anvil-sim starts");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut banner = String::new();
    stderr.read_line(&mut banner).expect("a banner");
    assert!(banner.starts_with("anvil-sim (profile fast) listening on http://127.0.0.1:"), "{banner}");
    assert!(banner.trim_end().ends_with("/v1 — Ctrl-C stops it"), "{banner}");
    let url = banner.split_whitespace().find(|w| w.starts_with("http://")).expect("a URL");
    let addr = url.trim_start_matches("http://").trim_end_matches("/v1");

    let mut stream = TcpStream::connect(addr).expect("connects");
    stream.write_all(b"GET /health HTTP/1.1\r\nHost: sim\r\nConnection: close\r\n\r\n").expect("request written");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response read");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.ends_with(r#"{"status":"ok"}"#), "{response}");

    let interrupted = Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill runs");
    assert!(interrupted.success());
    let status = child.wait().expect("anvil-sim ends");
    assert_eq!(status.code(), Some(0), "{status}");
}

#[test]
fn a_flag_it_cannot_use_exits_2() {
    for (args, says) in [
        (&["--profile", "nope"][..], "--profile \"nope\" is not a simulator profile; use one of: instant, fast"),
        (&["--listen", "not-an-address"][..], "--listen not-an-address: cannot listen there"),
        (
            &["--tokenizer", "/nonexistent/tokenizer.json"][..],
            "--tokenizer /nonexistent/tokenizer.json: cannot load it",
        ),
        (&["--no-such-flag"][..], "unexpected argument '--no-such-flag'"),
    ] {
        let out = anvil_sim().args(args).output().expect("anvil-sim runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
