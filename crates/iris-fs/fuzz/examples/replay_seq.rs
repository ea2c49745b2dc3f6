//! Replays one input of the `fs_seq` target: `cargo run --example replay_seq -- FILE` from
//! crates/iris-fs/fuzz (IRIS_FUZZ_TRACE=1 prints each operation and its outcome).

#[path = "../fuzz_targets/seq_ops.rs"]
mod seq_ops;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: replay_seq FILE")?;
    seq_ops::one(&std::fs::read(path)?);
    println!("clean");
    Ok(())
}
