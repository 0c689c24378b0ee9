//! Kubernetes' own clients against mem_etcd: kube-apiserver and kubectl end to end, the request
//! shapes kube-apiserver sends, and the flows of the installers that run etcd (kubeadm's stacked
//! etcd, k0smotron's hosted control planes).

mod etcd_pod;
mod k0smotron;
mod k8s_e2e;
mod k8s_shapes;
mod kubeadm;
