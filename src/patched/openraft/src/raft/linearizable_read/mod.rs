//! Defines the linearizable read protocol.

mod linearize_state;
mod linearizer;
mod linearizer_option;
mod read_log_id;

pub use linearize_state::LinearizeState;
pub use linearizer::Linearizer;
pub use linearizer_option::LinearizerOption;
pub use read_log_id::ReadLogId;
