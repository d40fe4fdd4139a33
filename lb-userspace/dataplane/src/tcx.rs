//! TC programs attached with TCX (kernel 6.6 or later; no qdisc) whose link is pinned,
//! so the program stays attached after the process exits and the next run swaps its
//! program in place: what `lb_tc` (node ingress), `lb_probe` (node egress) and
//! `lb_decap` (a backend's ingress) share.

use std::path::Path;

use aya::programs::{
    LinkOrder, SchedClassifier, TcAttachType,
    links::{FdLink, PinnedLink},
    tc::{SchedClassifierLink, TcAttachOptions},
};
use lb_model::dataplane::DataplaneError;

use crate::kernel::{AttachOutcome, program_error};

/// A failure of `action`, with its cause.
fn failed<E: std::error::Error + Send + Sync + 'static>(
    action: String,
) -> impl FnOnce(E) -> DataplaneError {
    move |source| DataplaneError::Program {
        action,
        source: Box::new(source),
    }
}

/// Attaches `prog` (named `name` in errors) with TCX at `attach` of `interface`, its
/// link pinned at `path`: a link already pinned there (a previous run's) runs `prog`
/// from now on, in one atomic update; else a new link is made and pinned. Returns which
/// happened and the link, re-opened from its pin (dropping it leaves the program
/// attached: the pin holds the link).
///
/// # Errors
/// Unknown interface, a kernel without TCX, or a pin that is not a TCX link.
pub fn attach_pinned(
    prog: &mut SchedClassifier,
    name: &str,
    interface: &str,
    attach: TcAttachType,
    path: &Path,
) -> Result<(AttachOutcome, SchedClassifierLink), DataplaneError> {
    let hook = match attach {
        TcAttachType::Egress => "egress",
        _ => "ingress",
    };
    let what = |action: &str| format!("{action} {name} on {interface} (TCX {hook})");
    if path.exists() {
        let pinned = PinnedLink::from_pin(path).map_err(failed(format!(
            "opening the pinned link {}",
            path.display()
        )))?;
        let link = SchedClassifierLink::try_from(FdLink::from(pinned))
            .map_err(failed(format!("{} is not a TCX link", path.display())))?;
        let id = prog.attach_to_link(link).map_err(program_error(what(
            "replacing the program of the pinned link of",
        )))?;
        let link = prog
            .take_link(id)
            .map_err(program_error(what("taking the link of")))?;
        return Ok((AttachOutcome::Replaced, link));
    }
    let id = prog
        .attach_with_options(
            interface,
            attach,
            TcAttachOptions::TcxOrder(LinkOrder::default()),
        )
        .map_err(program_error(what("attaching")))?;
    let link = prog
        .take_link(id)
        .map_err(program_error(what("taking the link of")))?;
    let fd = FdLink::try_from(link).map_err(failed(
        "the TC attachment is not a TCX link (kernel older than 6.6?)".to_owned(),
    ))?;
    let pinned = fd.pin(path).map_err(failed(format!(
        "pinning the TCX link at {}",
        path.display()
    )))?;
    let link = SchedClassifierLink::try_from(FdLink::from(pinned))
        .map_err(failed("re-opening the pinned link".to_owned()))?;
    Ok((AttachOutcome::Attached, link))
}
