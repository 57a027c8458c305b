//! Plans one small reshard; scripts/test-bindings.sh builds and runs it
//! against an installed libreshard found through pkg-config.
use reshard::{DType, Layout, Mesh, Plan, PlanInput, Sharding};

fn main() -> reshard::Result<()> {
    let mesh = Mesh::new(&["x"], &[2], None)?;
    let src = Layout::named(&mesh, &[4], &Sharding::new().split(["x"]))?;
    let dst = Layout::named(&mesh, &[4], &Sharding::new().replicated())?;
    let mut input = PlanInput::new()?;
    input.add_tensor("t", &[4], DType::F32, &src, &dst)?;
    let plan = Plan::new(&input)?;
    println!(
        "rust via pkg-config: reshard {}, plan {:016x}, {} network bytes",
        reshard::version(),
        plan.fingerprint(),
        plan.stats()?.network_bytes
    );
    Ok(())
}
