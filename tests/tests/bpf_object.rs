//! Properties of the embedded BPF objects themselves, read from their ELF.
//!
//! The BPF backend expands `memcpy`/`memset` inline when it can, but a `memmove` (what
//! LLVM makes of a struct copied through a raw pointer it cannot prove apart from the
//! source) and any copy it cannot expand become calls to compiler-builtins' versions:
//! byte loops of about six instructions per byte. One such call on the `nat` hand-over
//! cost ~35 ns per packet. A call is a relocation against the function's symbol, so
//! none may exist in the default object (what lbd runs). The log build, a diagnostic
//! one, copies its records with such calls.

use lb_dataplane::kernel::BPF_OBJECT;
use object::{Object, ObjectSection, ObjectSymbol, RelocationTarget};

/// The byte-loop functions no program may call.
const BYTE_LOOPS: [&str; 4] = ["memmove", "memcpy", "memset", "memcmp"];

/// Calls that stay, with why: `lb_probe` zeroes what it reads of a health probe (once
/// per probe the node sends, never on a client's packet; every other packet leaves
/// it at the mark test).
const ALLOWED: [(&str, &str); 1] = [("lb_probe", "memset")];

/// `(program, function)` for every call from `elf` to one of [`BYTE_LOOPS`]; the
/// program is the function symbol the call lies in.
fn byte_loop_calls(elf: &[u8]) -> Vec<(String, String)> {
    let file = object::File::parse(elf).expect("parse the object");
    let mut calls = Vec::new();
    for section in file.sections() {
        let caller = |offset: u64| {
            file.symbols()
                .filter(|s| s.section_index() == Some(section.index()) && s.size() > 0)
                .find(|s| (s.address()..s.address() + s.size()).contains(&offset))
                .and_then(|s| s.name().ok())
                .unwrap_or("?")
                .to_string()
        };
        for (offset, reloc) in section.relocations() {
            let RelocationTarget::Symbol(index) = reloc.target() else {
                continue;
            };
            let Ok(symbol) = file.symbol_by_index(index) else {
                continue;
            };
            let target = symbol.name().unwrap_or("");
            if BYTE_LOOPS.contains(&target) && !ALLOWED.contains(&(&*caller(offset), target)) {
                calls.push((caller(offset), target.to_string()));
            }
        }
    }
    calls
}

/// How many relocations `elf` has at all: the check above must be able to see some.
fn relocations(elf: &[u8]) -> usize {
    let file = object::File::parse(elf).expect("parse the object");
    file.sections().map(|s| s.relocations().count()).sum()
}

#[test]
fn no_program_calls_a_byte_loop_copy() {
    // Map references are relocations too: the reader sees them, so it would see a
    // call.
    assert!(relocations(BPF_OBJECT) > 100, "no relocations read");
    let calls = byte_loop_calls(BPF_OBJECT);
    assert!(
        calls.is_empty(),
        "calls to byte-loop functions (copy with lb-ebpf's mem::store, or by fields): \
         {calls:?}"
    );
}

/// Every program of both objects stays within BPF's stack limit by the stack reader
/// the benchmark reports with, which must see the programs and their frames (a
/// reader that found nothing would pass the limit trivially). The verifier refuses a
/// program over the limit, so a chain above it means the reader is wrong.
#[test]
fn every_program_fits_the_stack_limit_as_read() {
    use lb_testbed::bpfstack::{STACK_LIMIT, program_stacks};
    for (which, elf) in [
        ("default", BPF_OBJECT),
        ("log", lb_dataplane::kernel::BPF_OBJECT_LOG),
    ] {
        let stacks = program_stacks(elf).expect("read the stacks");
        let names: Vec<&str> = stacks.iter().map(|p| p.name.as_str()).collect();
        for program in ["lb_xdp", "lb_tc", "lb_nat", "lb_decap", "xdp_pass"] {
            assert!(names.contains(&program), "{which}: {program} in {names:?}");
        }
        for p in &stacks {
            assert!(
                p.chain <= STACK_LIMIT && p.chain >= p.frame,
                "{which}: {p:?} over the limit, or a chain below its own frame"
            );
        }
        let xdp = stacks.iter().find(|p| p.name == "lb_xdp").expect("lb_xdp");
        assert!(
            xdp.frame > 0 && xdp.chain > xdp.frame,
            "{which}: lb_xdp {xdp:?}"
        );
        let pass = stacks
            .iter()
            .find(|p| p.name == "xdp_pass")
            .expect("xdp_pass");
        assert_eq!((pass.frame, pass.chain), (0, 0), "{which}: xdp_pass");
    }
}
