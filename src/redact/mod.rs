//! What may be written, on the ground floor so that every stage writes by the same rules: `url`
//! takes credentials and query values out of every URL the tool writes; `secrets` is the one
//! sanitizer for every string that came from the server or the configuration (one line, bounded,
//! no invisible characters, never a secret of the run).

mod secrets;
mod url;

pub use secrets::{FIELD_CHARS, SCRUB_MIN_CHARS, SecretLog, Secrets, is_unsafe_char, sanitize_message, visible};
pub use url::{
    REDACTED, is_secret_param, keeps_value as keeps_query_value, redact_url, redact_urls_in, url_credentials,
};
