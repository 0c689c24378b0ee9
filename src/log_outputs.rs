//! `--log-outputs`: where the daemon's log lines go, as etcd's zap writes them: `stderr`,
//! `stdout`, `default` (stderr; etcd's journald detection does not apply), `systemd/journal`
//! (stderr, which journald collects from a service), or file paths (appended to), several at
//! once.

use std::fs::File;
use std::io::Write;
use std::sync::Arc;

use parking_lot::Mutex;

/// The outputs, shared by every log call.
#[derive(Clone, Debug)]
pub struct LogOutputs {
    stderr: bool,
    stdout: bool,
    /// Open log files; a lock each so that lines from several threads do not interleave.
    files: Arc<Vec<Mutex<File>>>,
}

impl LogOutputs {
    pub fn open(outputs: &[String]) -> Result<Self, String> {
        let (mut stderr, mut stdout, mut files) = (false, false, Vec::new());
        for o in outputs.iter().filter(|o| !o.is_empty()) {
            match o.as_str() {
                "default" | "stderr" | "systemd/journal" => stderr = true,
                "stdout" => stdout = true,
                path => {
                    let f = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)
                        .map_err(|e| format!("--log-outputs {path}: {e}"))?;
                    files.push(Mutex::new(f));
                }
            }
        }
        if !stdout && files.is_empty() {
            stderr = true;
        }
        Ok(Self { stderr, stdout, files: Arc::new(files) })
    }

    /// Whether the log goes to stderr alone (colours then follow the terminal).
    pub fn is_stderr_only(&self) -> bool {
        self.stderr && !self.stdout && self.files.is_empty()
    }
}

/// One log line's writer: buffers the line and writes it whole to every output on drop.
#[derive(Debug)]
pub struct Line {
    outputs: LogOutputs,
    buf: Vec<u8>,
}

impl Write for Line {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        let o = &self.outputs;
        if o.stderr {
            let _ = std::io::stderr().write_all(&self.buf);
        }
        if o.stdout {
            let _ = std::io::stdout().write_all(&self.buf);
        }
        for f in o.files.iter() {
            let _ = f.lock().write_all(&self.buf);
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogOutputs {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line { outputs: self.clone(), buf: Vec::new() }
    }
}
