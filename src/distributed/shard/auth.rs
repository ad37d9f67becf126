//! Authentication of the coordinator's messages: a per-run shared secret (`ANVIL_SHARD_TOKEN`),
//! never sent, from which each connection derives its own key.
//!
//! A connection starts with two plain `hello` lines, each carrying a fresh random nonce (the
//! shard's, then the coordinator's). Both sides derive the connection's key as
//! `HMAC-SHA256(token, CONTEXT ‖ shard nonce ‖ coordinator nonce)`, and every line after that,
//! both ways, is `<HMAC of the line, hex> <JSON>`: the HMAC covers the direction, the line's
//! number on this connection and the JSON bytes exactly as sent. So a line from a peer without
//! the token, a line replayed from another connection (other nonces), reflected back (other
//! direction), dropped, reordered or altered in transit fails, and is never acted on. Records
//! lines travel raw after a `records` message whose SHA-256 of them the HMAC covers.
//!
//! Without a token (allowed only for a coordinator on loopback, or with `--insecure-coordinator`)
//! the same protocol runs with a fixed key: it still catches corruption and a shard of another
//! protocol, but anyone who can reach the port could join.

use std::fmt;

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// The environment variable every shard of a run reads its shared secret from.
pub const TOKEN_ENV: &str = "ANVIL_SHARD_TOKEN";
/// Shortest token accepted: guessing it must be out of the question.
pub const MIN_TOKEN_CHARS: usize = 16;
/// Longest token accepted (a key, not a file).
const MAX_TOKEN_CHARS: usize = 4096;
/// Binds every derived key to this protocol.
const CONTEXT: &[u8] = b"anvil-load shard coordinator protocol 2\0";
/// The key of runs without a token: integrity, no authentication.
const NO_TOKEN: &[u8] = b"anvil-load: no ANVIL_SHARD_TOKEN";
/// Bytes of a connection nonce.
pub const NONCE_BYTES: usize = 16;
/// Hex characters of a line's HMAC.
pub const MAC_HEX: usize = 64;

/// The run's shared secret. Never printed: `Debug` withholds it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(Vec<u8>);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token([withheld])")
    }
}

impl Token {
    /// A token from `ANVIL_SHARD_TOKEN`'s value. Surrounding whitespace is dropped (a Secret made
    /// from a file often ends in a newline); errors never quote the value.
    pub fn parse(value: &str) -> Result<Token, String> {
        let t = value.trim();
        let chars = t.chars().count();
        if chars < MIN_TOKEN_CHARS {
            return Err(format!(
                "{TOKEN_ENV}: {chars} characters, fewer than {MIN_TOKEN_CHARS}; use a random secret, e.g. export {TOKEN_ENV}=$(openssl rand -hex 32)"
            ));
        }
        if chars > MAX_TOKEN_CHARS {
            return Err(format!(
                "{TOKEN_ENV}: {chars} characters, more than {MAX_TOKEN_CHARS}; use a random secret, e.g. export {TOKEN_ENV}=$(openssl rand -hex 32)"
            ));
        }
        if t.chars().any(char::is_control) {
            return Err(format!(
                "{TOKEN_ENV}: holds a control character (a line break?); export it without, e.g. export {TOKEN_ENV}=$(openssl rand -hex 32)"
            ));
        }
        Ok(Token(t.as_bytes().to_vec()))
    }

    /// The fixed key of a run without a token.
    pub fn none() -> Token {
        Token(NO_TOKEN.to_vec())
    }
}

/// A fresh random connection nonce.
pub fn nonce() -> [u8; NONCE_BYTES] {
    let mut n = [0u8; NONCE_BYTES];
    if SystemRandom::new().fill(&mut n).is_err() {
        // The system's generator failing is not expected; the process's own still gives a
        // nonce that does not repeat.
        n = rand::random::<u128>().to_le_bytes();
    }
    n
}

/// Which way a line travels: part of what its HMAC covers, so no line can be reflected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    ToCoordinator = 1,
    ToShard = 2,
}

/// One connection's key, from the token and both nonces.
#[derive(Clone)]
pub struct SessionKey(hmac::Key);

impl SessionKey {
    pub fn derive(token: &Token, shard_nonce: &[u8; NONCE_BYTES], coordinator_nonce: &[u8; NONCE_BYTES]) -> Self {
        let root = hmac::Key::new(hmac::HMAC_SHA256, &token.0);
        let mut ctx = hmac::Context::with_key(&root);
        ctx.update(CONTEXT);
        ctx.update(shard_nonce);
        ctx.update(coordinator_nonce);
        SessionKey(hmac::Key::new(hmac::HMAC_SHA256, ctx.sign().as_ref()))
    }

    fn tag(&self, direction: Direction, seq: u64, json: &[u8]) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.0);
        ctx.update(&[direction as u8]);
        ctx.update(&seq.to_be_bytes());
        ctx.update(json);
        ctx.sign()
    }
}

/// Signs the lines one side sends, numbering them.
pub struct Sealer {
    key: SessionKey,
    direction: Direction,
    seq: u64,
}

impl Sealer {
    pub fn new(key: SessionKey, direction: Direction) -> Self {
        Sealer { key, direction, seq: 0 }
    }

    /// `<hmac hex> <json>\n`.
    pub fn seal(&mut self, json: &[u8]) -> Vec<u8> {
        let tag = self.key.tag(self.direction, self.seq, json);
        self.seq += 1;
        let mut line = Vec::with_capacity(MAC_HEX + 2 + json.len());
        line.extend_from_slice(hex(tag.as_ref()).as_bytes());
        line.push(b' ');
        line.extend_from_slice(json);
        line.push(b'\n');
        line
    }
}

/// Checks the lines the other side sends, in order.
pub struct Opener {
    key: SessionKey,
    direction: Direction,
    seq: u64,
}

/// A line that is not what the other side's key and this line's number give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forged;

impl Opener {
    pub fn new(key: SessionKey, direction: Direction) -> Self {
        Opener { key, direction, seq: 0 }
    }

    /// Lines already opened on this connection.
    pub fn opened(&self) -> u64 {
        self.seq
    }

    /// The JSON of a sealed line (newline included or not), once its HMAC checks out.
    pub fn open<'a>(&mut self, line: &'a [u8]) -> Result<&'a [u8], Forged> {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        if line.len() < MAC_HEX + 1 || line[MAC_HEX] != b' ' {
            return Err(Forged);
        }
        let (mac, json) = (&line[..MAC_HEX], &line[MAC_HEX + 1..]);
        let Some(mac) = unhex(mac) else { return Err(Forged) };
        let mut ctx = Vec::with_capacity(9 + json.len());
        ctx.push(self.direction as u8);
        ctx.extend_from_slice(&self.seq.to_be_bytes());
        ctx.extend_from_slice(json);
        // Constant-time comparison.
        hmac::verify(&self.key.0, &ctx, &mac).map_err(|_| Forged)?;
        self.seq += 1;
        Ok(json)
    }
}

/// SHA-256 over records bytes as they are sent or received, in pieces.
pub struct Digest(ring::digest::Context);

impl Default for Digest {
    fn default() -> Self {
        Digest(ring::digest::Context::new(&ring::digest::SHA256))
    }
}

impl Digest {
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// `sha256:<hex>`.
    pub fn finish(self) -> String {
        format!("sha256:{}", hex(self.0.finish().as_ref()))
    }
}

pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Lowercase or uppercase hex to bytes; `None` for anything else.
pub fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    text.chunks(2).map(|p| Some(digit(p[0])? << 4 | digit(p[1])?)).collect()
}

/// A nonce from its hex form.
pub fn nonce_from_hex(text: &str) -> Option<[u8; NONCE_BYTES]> {
    unhex(text.as_bytes())?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(a: &Token, b: &Token) -> (Sealer, Opener) {
        let (s, c) = ([1u8; NONCE_BYTES], [2u8; NONCE_BYTES]);
        (
            Sealer::new(SessionKey::derive(a, &s, &c), Direction::ToCoordinator),
            Opener::new(SessionKey::derive(b, &s, &c), Direction::ToCoordinator),
        )
    }

    #[test]
    fn sealed_lines_open_in_order_and_nothing_else_does() {
        let token = Token::parse("0123456789abcdef0123").unwrap();
        let (mut sealer, mut opener) = pair(&token, &token);
        let first = sealer.seal(br#"{"type":"alive"}"#);
        let second = sealer.seal(br#"{"type":"finished"}"#);
        // Out of order, then in order.
        assert_eq!(opener.open(&second), Err(Forged));
        assert_eq!(opener.open(&first).unwrap(), br#"{"type":"alive"}"#);
        // Replayed.
        assert_eq!(opener.open(&first), Err(Forged));
        // Altered: one byte of the JSON.
        let mut altered = second.clone();
        let at = altered.len() - 3;
        altered[at] ^= 1;
        assert_eq!(opener.open(&altered), Err(Forged));
        assert_eq!(opener.open(&second).unwrap(), br#"{"type":"finished"}"#);
        assert_eq!(opener.opened(), 2);
        // Another token, another direction, garbage.
        let other = Token::parse("another-token-of-enough-length").unwrap();
        let (mut sealer, mut opener) = pair(&other, &token);
        assert_eq!(opener.open(&sealer.seal(b"{}")), Err(Forged));
        let key = SessionKey::derive(&token, &[1; NONCE_BYTES], &[2; NONCE_BYTES]);
        let mut reflected = Sealer::new(key.clone(), Direction::ToShard);
        assert_eq!(Opener::new(key, Direction::ToCoordinator).open(&reflected.seal(b"{}")), Err(Forged));
        for junk in [&b""[..], b"\n", b"{\"type\":\"join\"}\n", &[b'z'; 70][..]] {
            assert_eq!(opener.open(junk), Err(Forged), "{junk:?}");
        }
    }

    #[test]
    fn tokens_are_checked_and_never_shown() {
        let t = Token::parse("  s3cr3t-s3cr3t-s3cr3t\n").unwrap();
        assert_eq!(t, Token::parse("s3cr3t-s3cr3t-s3cr3t").unwrap());
        assert!(!format!("{t:?}").contains("s3cr3t"));
        let e = Token::parse("short").unwrap_err();
        assert!(e.contains(TOKEN_ENV) && e.contains("openssl rand") && !e.contains("short"), "{e}");
        let e = Token::parse("0123456789\u{1b}abcdef-secret").unwrap_err();
        assert!(e.contains("control character") && !e.contains("secret"), "{e}");
    }

    #[test]
    fn hex_and_digests() {
        assert_eq!(hex(&[0, 0xab, 0xff]), "00abff");
        assert_eq!(unhex(b"00ABff"), Some(vec![0, 0xab, 0xff]));
        assert_eq!(unhex(b"0g"), None);
        assert_eq!(unhex(b"abc"), None);
        let mut d = Digest::default();
        d.update(b"a");
        d.update(b"bc");
        assert_eq!(d.finish(), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_ne!(nonce(), nonce());
    }
}
