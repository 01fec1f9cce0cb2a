"""pod-security.py FILE...: checks every pod in the Kubernetes manifests FILE... (YAML,
several documents a file; `-` reads standard input) against the Pod Security Standards'
"restricted" profile (which includes "baseline"), as the admission controller enforces
it at its latest version: a Pod, and the pod template of a Deployment, StatefulSet,
DaemonSet, ReplicaSet, Job, CronJob or any other object that holds one (wherever a
`containers` list is). Prints each violation as FILE: KIND NAME: WHERE: WHAT, then a
summary; exits 1 when there is a violation, a file does not parse or no file holds a
pod, 0 otherwise.
Windows pods (spec.os.name: windows) are out of scope and refused.

Needs PyYAML (scripts/check-deploy installs it with kubernetes-validate)."""
import sys

import yaml

# Baseline: the sysctls a pod may set.
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t",
                 "container_engine_t"}
# Restricted: the only volume types.
VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
# Seccomp and AppArmor profiles: the runtime's default or one on the node.
PROFILES = {"RuntimeDefault", "Localhost"}
PROFILE = "must be RuntimeDefault or Localhost"
UNSET = "must be unset or false"


def profile(at, sc, key):
    """A seccompProfile's or appArmorProfile's type, when set and not allowed; `at` is
    the prefix of the field's path."""
    kind = (sc.get(key) or {}).get("type")
    if kind is not None and kind not in PROFILES:
        return [(f"{at}{key}.type", f"{kind}: {PROFILE}")]
    return []


def selinux(at, sc):
    o = sc.get("seLinuxOptions") or {}
    out = []
    if o.get("type", "") not in SELINUX_TYPES:
        out.append((f"{at}seLinuxOptions.type", f"{o.get('type')}: not an allowed type"))
    for k in ("user", "role"):
        if o.get(k):
            out.append((f"{at}seLinuxOptions.{k}", "must be unset"))
    return out


def pod_problems(spec, annotations):
    """The restricted profile's violations in one PodSpec, as (where, what)."""
    psc = spec.get("securityContext") or {}
    at = "securityContext."
    out = []
    if (spec.get("os") or {}).get("name") == "windows":
        out.append(("os.name", "a Windows pod: not checked here"))
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            out.append((key, f"{UNSET} (host namespaces)"))
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        out.append((f"{at}windowsOptions.hostProcess", UNSET))
    for s in psc.get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            out.append((f"{at}sysctls", f"{s.get('name')} is not a safe sysctl"))
    out += selinux(at, psc) + profile(at, psc, "appArmorProfile")
    out += profile(at, psc, "seccompProfile")
    for k, v in (annotations or {}).items():
        if k.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            v == "runtime/default" or str(v).startswith("localhost/")
        ):
            allowed = "must be runtime/default or localhost/*"
            out.append((f"metadata.annotations[{k}]", f"{v}: {allowed}"))
    for v in spec.get("volumes") or []:
        bad = [k for k in v if k != "name" and k not in VOLUME_TYPES]
        if bad:
            only = f"type {', '.join(bad)}: only {', '.join(sorted(VOLUME_TYPES))}"
            out.append((f"volume {v.get('name')}", only))
    if psc.get("runAsNonRoot") is False:
        out.append((f"{at}runAsNonRoot", "must not be false"))
    if psc.get("runAsUser") == 0:
        out.append((f"{at}runAsUser", "must not be 0 (root)"))
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(field) or []:
            out += container_problems(f"{field[:-1]} {c.get('name')}: ", c, psc)
    return out


def container_problems(name, c, psc):
    """A container's violations, given the pod's securityContext it inherits from;
    `name` prefixes each."""
    sc = c.get("securityContext") or {}
    at = f"{name}securityContext."
    out = []
    if sc.get("privileged"):
        out.append((f"{at}privileged", UNSET))
    if (sc.get("windowsOptions") or {}).get("hostProcess"):
        out.append((f"{at}windowsOptions.hostProcess", UNSET))
    for p in c.get("ports") or []:
        if p.get("hostPort"):
            port = p.get("name") or p.get("containerPort")
            out.append((f"{name}ports {port}", "hostPort must be unset or 0"))
    if sc.get("procMount", "Default") != "Default":
        out.append((f"{at}procMount", "must be Default or unset"))
    out += selinux(at, sc) + profile(at, sc, "appArmorProfile")
    if sc.get("allowPrivilegeEscalation") is not False:
        out.append((f"{at}allowPrivilegeEscalation", "must be false"))
    here_or_pod = "here or in the pod's securityContext"
    nonroot = sc.get("runAsNonRoot")
    if nonroot is False:
        out.append((f"{at}runAsNonRoot", "must not be false"))
    elif nonroot is None and psc.get("runAsNonRoot") is not True:
        out.append((f"{at}runAsNonRoot", f"must be true, {here_or_pod}"))
    if sc.get("runAsUser") == 0:
        out.append((f"{at}runAsUser", "must not be 0 (root)"))
    out += profile(at, sc, "seccompProfile")
    if "seccompProfile" not in sc and "seccompProfile" not in psc:
        out.append((f"{at}seccompProfile.type", f"{PROFILE}, {here_or_pod}"))
    caps = sc.get("capabilities") or {}
    if "ALL" not in (caps.get("drop") or []):
        out.append((f"{at}capabilities.drop", "must include ALL"))
    added = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
    if added:
        only = f"{', '.join(sorted(added))}: only NET_BIND_SERVICE"
        out.append((f"{at}capabilities.add", only))
    return out


def pods(node, metadata=None, path=""):
    """Every PodSpec in a document: (where, spec, the annotations of its metadata)."""
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list):
            yield path or "spec", node, (metadata or {}).get("annotations")
            return
        for k, v in node.items():
            inner = f"{path}.{k}" if path else k
            yield from pods(v, node.get("metadata") if k == "spec" else None, inner)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from pods(v, None, f"{path}[{i}]")


def main(paths):
    problems, checked, broken = 0, 0, 0
    for path in paths:
        try:
            text = sys.stdin.read() if path == "-" else open(path).read()
            docs = [d for d in yaml.safe_load_all(text) if d]
        except (OSError, yaml.YAMLError) as e:
            print(f"{path}: cannot read: {e}")
            broken += 1
            continue
        for doc in docs:
            if not isinstance(doc, dict):
                continue
            name = f"{doc.get('kind', '?')} {(doc.get('metadata') or {}).get('name', '?')}"
            for where, spec, annotations in pods(doc):
                checked += 1
                for w, what in pod_problems(spec, annotations):
                    problems += 1
                    print(f"{path}: {name}: {where}: {w}: {what}")
    print(f"pod-security: {checked} pod(s) checked against the restricted profile, "
          f"{problems} violation(s)")
    if not checked:
        print("pod-security: no pod found: nothing was checked")
    return 1 if problems or broken or not checked else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
