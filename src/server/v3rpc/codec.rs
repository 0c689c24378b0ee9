//! The protobuf codec every gRPC service uses: tonic's prost codec with small buffers.
//!
//! tonic starts each call's encode and decode buffers at 8 KiB. An etcd request or reply is
//! usually far smaller (a put reply is about 30 bytes, a Lease update about 400), and those
//! buffers were a fresh pair of 8 KiB allocations per request: the allocator kept handing out
//! new pages for them, and zeroing those pages in the kernel took 8-15% of the server's CPU
//! per put. Buffers grow on demand, so large ranges and watch batches still work; they pay a
//! few reallocations instead.

//!
//! It also counts the bytes of the messages a server exchanges with etcd's clients
//! (`etcd_network_client_grpc_{sent,received}_bytes_total`): the length of each reply it
//! encodes and each request it decodes, read off the buffers (no second size computation).

use std::marker::PhantomData;
use std::sync::atomic::Ordering;

use bytes::{Buf, BufMut};
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

use crate::metrics::CLIENT_GRPC_BYTES;

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
    type Encoder = Counted<ProstEncoder<T>>;
    type Decoder = Counted<ProstDecoder<U>>;

    fn encoder(&mut self) -> Self::Encoder {
        Counted {
            inner: ProstCodec::<T, U>::raw_encoder(BufferSettings::new(
                ENCODE_BUFFER,
                YIELD_THRESHOLD,
            )),
            client: serves_clients::<T>(),
        }
    }

    fn decoder(&mut self) -> Self::Decoder {
        Counted {
            inner: ProstCodec::<T, U>::raw_decoder(BufferSettings::new(
                DECODE_BUFFER,
                YIELD_THRESHOLD,
            )),
            client: serves_clients::<T>(),
        }
    }
}

/// Whether a codec that encodes `T` is a server's codec for one of etcd's client services
/// (it encodes their replies): not a client's (which encodes requests), nor the peer
/// services' (whose messages are mem_etcd's own).
fn serves_clients<T>() -> bool {
    let name = std::any::type_name::<T>();
    let etcd = ["::etcdserverpb::", "::v3lockpb::", "::v3electionpb::"];
    (etcd.iter().any(|p| name.contains(p)) && name.ends_with("Response"))
        || name.ends_with("::WatchFrame")
}

/// An encoder or decoder that counts the bytes it handles when it serves etcd's clients.
#[derive(Debug)]
pub struct Counted<C> {
    inner: C,
    client: bool,
}

impl<C: Encoder<Error = Status>> Encoder for Counted<C> {
    type Item = C::Item;
    type Error = Status;

    fn encode(&mut self, item: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        let before = dst.remaining_mut();
        self.inner.encode(item, dst)?;
        if self.client {
            let n = before - dst.remaining_mut();
            CLIENT_GRPC_BYTES.sent.fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.inner.buffer_settings()
    }
}

impl<C: Decoder<Error = Status>> Decoder for Counted<C> {
    type Item = C::Item;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Status> {
        if self.client {
            CLIENT_GRPC_BYTES.received.fetch_add(src.remaining() as u64, Ordering::Relaxed);
        }
        self.inner.decode(src)
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.inner.buffer_settings()
    }
}
