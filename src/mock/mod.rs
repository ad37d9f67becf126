//! The embedded simulated OpenAI-compatible server.
