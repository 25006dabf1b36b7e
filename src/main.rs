fn main() -> std::process::ExitCode {
    roger::run(std::env::args_os())
}
