fn main() -> std::process::ExitCode {
    anvil_load::cli::main()
}
