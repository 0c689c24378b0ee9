//! The protobuf codec every gRPC service uses: tonic's prost codec with small buffers.
//!
//! tonic starts each call's encode and decode buffers at 8 KiB. An etcd request or reply is
//! usually far smaller (a put reply is about 30 bytes, a Lease update about 400), and those
//! buffers were a fresh pair of 8 KiB allocations per request: the allocator kept handing out
//! new pages for them, and zeroing those pages in the kernel took 8-15% of the server's CPU
//! per put. Buffers grow on demand, so large ranges and watch batches still work; they pay a
//! few reallocations instead.

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// First capacity of a reply's buffer.
const ENCODE_BUFFER: usize = 512;
/// First capacity of a request's buffer (most requests, Lease updates included, fit).
const DECODE_BUFFER: usize = 2048;
/// tonic's default: a streaming encoder yields to the runtime past this many bytes.
const YIELD_THRESHOLD: usize = 32 * 1024;

/// Named by `build.rs` (`codec_path`) for every generated client and server.
#[derive(Debug)]
pub struct SmallBufferCodec<T, U>(PhantomData<fn() -> (T, U)>);

impl<T, U> Default for SmallBufferCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for SmallBufferCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(BufferSettings::new(ENCODE_BUFFER, YIELD_THRESHOLD))
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(BufferSettings::new(DECODE_BUFFER, YIELD_THRESHOLD))
    }
}
