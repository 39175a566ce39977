//! The externalgrpc wire contract.

/// Generated messages, client and server of `clusterautoscaler.cloudprovider.v1.externalgrpc`.
pub mod v1 {
    tonic::include_proto!("clusterautoscaler.cloudprovider.v1.externalgrpc");
}
