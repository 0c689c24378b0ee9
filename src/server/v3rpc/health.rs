//! gRPC's standard health service (`grpc.health.v1.Health`) on the client URLs, as etcd
//! serves it (etcd's `v3rpc/health.go` over grpc-go's `health.Server`).
//!
//! etcd registers one status, for the server as a whole (the empty service name), and sets it
//! SERVING once it serves clients; it goes NOT_SERVING only while a defragmentation runs with
//! the StopGRPCServiceOnDefrag feature gate. mem_etcd's defragmentation has nothing to stop
//! for, so a member answering this call is SERVING. Other names are unknown, with grpc-go's
//! answers: Check fails NOT_FOUND "unknown service"; Watch says SERVICE_UNKNOWN and stays open.

use std::pin::Pin;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// The service etcd answers for: the whole server.
const ALL_SERVICES: &str = "";

/// The health service (stateless: see the module's comment).
#[derive(Debug, Default)]
pub struct HealthService;

/// The health service, ready for a router.
pub fn service() -> HealthServer<HealthService> {
    HealthServer::new(HealthService)
}

fn status(service: &str) -> Option<ServingStatus> {
    (service == ALL_SERVICES).then_some(ServingStatus::Serving)
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        req: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        match status(&req.get_ref().service) {
            Some(s) => Ok(Response::new(HealthCheckResponse { status: s as i32 })),
            None => Err(Status::not_found("unknown service")),
        }
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        req: Request<HealthCheckRequest>,
    ) -> Result<Response<WatchStream>, Status> {
        use tokio_stream::StreamExt;
        let s = status(&req.get_ref().service).unwrap_or(ServingStatus::ServiceUnknown);
        // The status never changes: one message, then the stream stays open until the client
        // or the server's shutdown ends it, as grpc-go's does.
        let first = tokio_stream::once(Ok(HealthCheckResponse { status: s as i32 }));
        Ok(Response::new(Box::pin(first.chain(tokio_stream::pending()))))
    }
}
