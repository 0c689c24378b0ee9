//! Kubernetes' own clients against mem_etcd: kube-apiserver and kubectl end to end, the request
//! shapes kube-apiserver sends, kubeadm's flow.

mod k8s_e2e;
mod k8s_shapes;
mod kubeadm;
