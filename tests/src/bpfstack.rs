//! The BPF stack each program of an object uses, read from its code: what the
//! per-packet benchmark reports beside the verifier's instruction counts.
//!
//! BPF gives a program 512 bytes of stack for its whole chain of calls, and the
//! kernel does not report what a loaded program uses (`bpf_prog_info` has no such
//! field; the verifier prints it only in a log the loader discards on success). So it
//! is read here from the ELF: a function's frame is the deepest byte below the frame
//! pointer (`r10`) that its instructions reach, by a load or store relative to `r10`
//! or through a register just set to `r10` plus an offset (a pointer to a stack slot,
//! as helpers take); a program's chain is its frame plus the deepest chain of the
//! functions it calls, each frame rounded up to 16 bytes as the verifier does when it
//! checks the limit for a JIT-compiled program. Code the verifier finds dead still
//! counts here, so these are upper bounds of what the verifier counts.

use std::collections::HashMap;

use object::{Object, ObjectSection, ObjectSymbol, RelocationTarget, SectionIndex, SymbolKind};

/// The stack limit of one program's chain of calls.
pub const STACK_LIMIT: u32 = 512;

/// One program's stack, in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramStack {
    /// The program's function symbol.
    pub name: String,
    /// Its own frame.
    pub frame: u32,
    /// Its frame and its deepest chain of callees' frames, each rounded up to 16.
    pub chain: u32,
}

/// A function of the object: where its code is and what it calls.
struct Function {
    name: String,
    section: SectionIndex,
    /// Byte range in its section.
    start: u64,
    end: u64,
    frame: u32,
    calls: Vec<usize>,
}

const INSN: usize = 8;
const FP: u8 = 10;
/// `BPF_JMP | BPF_CALL`, and the source register that marks a call of a BPF function
/// (rather than of a helper or kfunc).
const CALL: u8 = 0x85;
const PSEUDO_CALL: u8 = 1;
/// `BPF_LD | BPF_IMM | BPF_DW`: a 64-bit immediate taking two instruction slots.
const LD_IMM64: u8 = 0x18;
/// `BPF_ALU64 | BPF_MOV | BPF_X` and `BPF_ALU64 | BPF_ADD | BPF_K`.
const MOV64_REG: u8 = 0xbf;
const ADD64_IMM: u8 = 0x07;

/// One decoded instruction's fields.
struct Insn {
    code: u8,
    dst: u8,
    src: u8,
    off: i16,
    imm: i32,
}

fn decode(b: &[u8]) -> Insn {
    Insn {
        code: b[0],
        dst: b[1] & 0x0f,
        src: b[1] >> 4,
        off: i16::from_le_bytes([b[2], b[3]]),
        imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
    }
}

/// The deepest stack byte `code` (one function's instructions) reaches, and the
/// instruction index (within `code`) and immediate of each BPF-function call in it.
/// `code`'s length is a multiple of eight.
pub fn frame_of(code: &[u8]) -> (u32, Vec<(usize, i32)>) {
    // What each register holds as an offset from the frame pointer, when it is one.
    let mut fp_offset: [Option<i64>; 11] = [None; 11];
    let mut depth: i64 = 0;
    let mut calls = Vec::new();
    let mut reach = |offset: i64| depth = depth.max(-offset);
    let mut i = 0;
    while (i + 1) * INSN <= code.len() {
        let insn = decode(&code[i * INSN..(i + 1) * INSN]);
        let (dst, src) = (usize::from(insn.dst), usize::from(insn.src));
        let class = insn.code & 0x07;
        match insn.code {
            CALL => {
                if insn.src == PSEUDO_CALL {
                    calls.push((i, insn.imm));
                }
                // r0 to r5 are clobbered by any call.
                fp_offset[..6].fill(None);
            }
            LD_IMM64 => {
                if dst < 11 {
                    fp_offset[dst] = None;
                }
                i += 1;
            }
            MOV64_REG if dst < 11 && src < 11 => {
                fp_offset[dst] = if insn.src == FP {
                    Some(0)
                } else {
                    fp_offset[src]
                };
            }
            ADD64_IMM if dst < 11 => {
                if let Some(o) = fp_offset[dst].as_mut() {
                    *o += i64::from(insn.imm);
                    reach(*o);
                }
            }
            _ if class == 0x01 => {
                // LDX: `dst = *(src + off)`.
                if insn.src == FP {
                    reach(i64::from(insn.off));
                } else if let Some(o) = fp_offset.get(src).copied().flatten() {
                    reach(o + i64::from(insn.off));
                }
                if dst < 11 {
                    fp_offset[dst] = None;
                }
            }
            _ if class == 0x02 || class == 0x03 => {
                // ST / STX: `*(dst + off) = imm / src`.
                if insn.dst == FP {
                    reach(i64::from(insn.off));
                } else if let Some(o) = fp_offset.get(dst).copied().flatten() {
                    reach(o + i64::from(insn.off));
                }
            }
            // Any other ALU operation writes its destination.
            _ if (class == 0x04 || class == 0x07) && dst < 11 => fp_offset[dst] = None,
            _ => {}
        }
        i += 1;
    }
    (u32::try_from(depth).unwrap_or(u32::MAX), calls)
}

/// Every program of the BPF object `elf` (a function in a section other than
/// `.text`) with its frame and chain, by name.
///
/// # Errors
/// An object that does not parse, or a call whose target is no function.
pub fn program_stacks(elf: &[u8]) -> Result<Vec<ProgramStack>, String> {
    let file = object::File::parse(elf).map_err(|e| format!("parse the object: {e}"))?;
    let mut functions: Vec<Function> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
        .filter_map(|s| {
            Some(Function {
                name: s.name().ok()?.to_owned(),
                section: s.section_index()?,
                start: s.address(),
                end: s.address() + s.size(),
                frame: 0,
                calls: Vec::new(),
            })
        })
        .collect();
    let at = |functions: &[Function], section: SectionIndex, byte: u64| {
        functions
            .iter()
            .position(|f| f.section == section && (f.start..f.end).contains(&byte))
    };
    let mut found: Vec<(u32, Vec<usize>)> = Vec::new();
    for f in &functions {
        let section = file
            .section_by_index(f.section)
            .map_err(|e| format!("{}: {e}", f.name))?;
        let data = section.data().map_err(|e| format!("{}: {e}", f.name))?;
        let code = data
            .get(f.start as usize..f.end as usize)
            .ok_or_else(|| format!("{}: code outside its section", f.name))?;
        let relocations: HashMap<u64, RelocationTarget> = section
            .relocations()
            .map(|(offset, r)| (offset, r.target()))
            .collect();
        let (frame, calls) = frame_of(code);
        let mut callees = Vec::new();
        for (index, imm) in calls {
            let offset = f.start + (index * INSN) as u64;
            // A call into another section is relocated against the callee's (or its
            // section's) symbol, the immediate counting from it; one within the
            // section counts from the next instruction.
            let (section, target) = match relocations.get(&offset) {
                Some(RelocationTarget::Symbol(sym)) => {
                    let sym = file
                        .symbol_by_index(*sym)
                        .map_err(|e| format!("{}: {e}", f.name))?;
                    let section = sym
                        .section_index()
                        .ok_or_else(|| format!("{}: call to an undefined symbol", f.name))?;
                    (section, sym.address() as i64 + (i64::from(imm) + 1) * 8)
                }
                _ => (f.section, offset as i64 + (i64::from(imm) + 1) * 8),
            };
            let callee = u64::try_from(target)
                .ok()
                .and_then(|t| at(&functions, section, t))
                .ok_or_else(|| {
                    format!("{}: a call at byte {offset} reaches no function", f.name)
                })?;
            callees.push(callee);
        }
        found.push((frame, callees));
    }
    for (f, (frame, calls)) in functions.iter_mut().zip(found) {
        f.frame = frame;
        f.calls = calls;
    }
    let mut memo = HashMap::new();
    let mut programs: Vec<ProgramStack> = functions
        .iter()
        .enumerate()
        .filter(|(_, f)| {
            file.section_by_index(f.section)
                .ok()
                .and_then(|s| s.name().ok().map(|n| n != ".text"))
                .unwrap_or(false)
        })
        .map(|(i, f)| ProgramStack {
            name: f.name.clone(),
            frame: f.frame,
            chain: chain(&functions, i, &mut memo, 0),
        })
        .collect();
    programs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(programs)
}

/// `f`'s frame rounded up to 16 plus its deepest callee's chain. BPF has no
/// recursion (the verifier refuses it); `depth` stops a malformed object's cycle.
fn chain(functions: &[Function], f: usize, memo: &mut HashMap<usize, u32>, depth: u32) -> u32 {
    if let Some(&c) = memo.get(&f) {
        return c;
    }
    let own = functions[f].frame.div_ceil(16) * 16;
    let deepest = if depth > 64 {
        0
    } else {
        functions[f]
            .calls
            .iter()
            .map(|&c| chain(functions, c, memo, depth + 1))
            .max()
            .unwrap_or(0)
    };
    let c = own + deepest;
    memo.insert(f, c);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = code;
        b[1] = dst | src << 4;
        b[2..4].copy_from_slice(&off.to_le_bytes());
        b[4..8].copy_from_slice(&imm.to_le_bytes());
        b
    }

    fn code(insns: &[[u8; 8]]) -> Vec<u8> {
        insns.concat()
    }

    /// Stores and loads at the frame pointer, and a pointer made from it for a
    /// helper, each set the depth; other registers' offsets do not.
    #[test]
    fn frames_are_the_deepest_byte_reached() {
        // *(u64 *)(r10 - 16) = r1; r2 = *(u32 *)(r10 - 40); exit
        let c = code(&[
            insn(0x7b, FP, 1, -16, 0),
            insn(0x61, 2, FP, -40, 0),
            insn(0x95, 0, 0, 0, 0),
        ]);
        assert_eq!(frame_of(&c).0, 40);
        // r1 = r10; r1 += -72; call helper 1 (a map lookup with a key on the stack)
        let c = code(&[
            insn(MOV64_REG, 1, FP, 0, 0),
            insn(ADD64_IMM, 1, 0, 0, -72),
            insn(CALL, 0, 0, 0, 1),
        ]);
        assert_eq!(frame_of(&c).0, 72);
        // r6 = r10; r6 += -8; *(u8 *)(r6 - 100) = 0
        let c = code(&[
            insn(MOV64_REG, 6, FP, 0, 0),
            insn(ADD64_IMM, 6, 0, 0, -8),
            insn(0x72, 6, 0, -100, 0),
        ]);
        assert_eq!(frame_of(&c).0, 108);
        // r1 = r2; r1 += -300; *(u64 *)(r1 + 0) = 0: not the stack
        let c = code(&[
            insn(MOV64_REG, 1, 2, 0, 0),
            insn(ADD64_IMM, 1, 0, 0, -300),
            insn(0x7a, 1, 0, 0, 0),
        ]);
        assert_eq!(frame_of(&c).0, 0);
        // r1 = r10; call helper (clobbers r1); r1 += -300: no longer the stack
        let c = code(&[
            insn(MOV64_REG, 1, FP, 0, 0),
            insn(CALL, 0, 0, 0, 1),
            insn(ADD64_IMM, 1, 0, 0, -300),
        ]);
        assert_eq!(frame_of(&c).0, 0);
    }

    /// A 64-bit immediate's second slot is not read as an instruction, and calls of
    /// BPF functions are listed, helper calls not.
    #[test]
    fn calls_and_wide_immediates() {
        let mut second = insn(0, 0, 0, 0, 0);
        // A second slot that would read as a deep store if decoded.
        second[0] = 0x7a;
        second[1] = FP;
        second[2..4].copy_from_slice(&(-400i16).to_le_bytes());
        let c = code(&[
            insn(LD_IMM64, 1, 0, 0, 7),
            second,
            insn(CALL, 0, PSEUDO_CALL, 0, 5),
            insn(CALL, 0, 0, 0, 12),
            insn(0x95, 0, 0, 0, 0),
        ]);
        let (frame, calls) = frame_of(&c);
        assert_eq!(frame, 0);
        assert_eq!(calls, vec![(2, 5)]);
    }
}
