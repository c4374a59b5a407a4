"""Which flavors Kueue v0.19.2 gives a Workload's pod sets in one ClusterQueue, and so whether it admits it: the
scheduler's flavor assignment, function by function (``pkg/scheduler/flavorassigner/flavorassigner.go``), over
the ClusterQueue's quota and, in a cohort, its neighbours' (``pkg/cache/scheduler/resource_node.go``).

The preview and the submit command ask it whether a queue could ever admit a run (:func:`admission_problem`);
the tests' fake Kueue admits with it, and Kueue's own test cases hold it (tests/upstream/).

* :meth:`FlavorAssigner.assign` is ``assignFlavors``: pod set by pod set (pod sets of one topology group together),
  resource by resource in Kueue's order (``SliceRequests``: by the FNV-1a hash of the name), each resource group
  tried flavor by flavor (``findFlavorForPodSets``: the flavor's taints and node labels against the pod set's
  tolerations and node selector, ``checkFlavorForPodSets``; its quota, ``fitsResourceQuota``; which flavor wins,
  ``shouldTryNextFlavor`` and ``isPreferred``). A resource the ClusterQueue does not cover makes the pod set
  unfit, unless the strategy is ``IgnoreUndeclared`` (then it is skipped) or the request is zero.
* The per-pod-set rule: a pod set that asks for something but ends with no flavor (``resolvePodSetFlavors``)
  fails the assignment, which stops there. Under ``IgnoreUndeclared`` such a pod set has no reason to give, so
  the assignment reads ``Fit`` and names fewer pod sets than the Workload has: Kueue then writes an admission
  the Workload CRD refuses (``podSetAssignments must have the same number of podSets as the spec``), and the
  run is never admitted (:attr:`Assignment.complete`).

Not modelled: topology-aware scheduling, partial admission, fair sharing (but for what it does to preempting while
borrowing), workload slices' flavor pinning, preemption itself (which Workloads a preemption would evict: the
caller's ``oracle`` says whether one could), cohorts deeper than one level, ``LastAssignment`` (every search starts
at the first flavor), errors (a node selector Kueue cannot parse) and ``FlavorAssignmentAttempts`` (the
observability record).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Optional, Sequence

from gke_ray_tpu.core.kueue import BLOCK_UNDECLARED, IGNORE_UNDECLARED
from gke_ray_tpu.core.kueue_quota import PodSet
from gke_ray_tpu.core.quantities import kueue_string, kueue_value

NO_FIT, PREEMPT, FIT = 0, 1, 3
"""``FlavorAssignmentMode``, worst to best (``DeferredFit``, 2, needs preemptions in flight: not reached here)."""
MODE_NAMES = {NO_FIT: "NoFit", PREEMPT: "Preempt", FIT: "Fit"}

_NO_FIT, _NO_CANDIDATES, _PREEMPT, _RECLAIM, _FIT = range(5)
"""``preemptionMode``, worst to best."""
PREEMPTION_MODES = {"noFit": _NO_FIT, "noPreemptionCandidates": _NO_CANDIDATES, "preempt": _PREEMPT,
                    "reclaim": _RECLAIM, "fit": _FIT}
POSSIBILITIES = {"NoCandidates": _NO_CANDIDATES, "Preempt": _PREEMPT, "Reclaim": _RECLAIM}
"""``preemptioncommon.PreemptionPossibility`` as ``fromPreemptionPossibility`` reads it."""
UNLIMITED = math.inf
PODS = "pods"

Oracle = Callable[[str, str, int], tuple[str, int]]
"""``SimulatePreemption``: (flavor, resource, quantity) -> (a :data:`POSSIBILITIES` key, borrowing level after)."""


def no_candidates(flavor: str, resource: str, amount: int) -> tuple[str, int]:
    """The preemptor of a ClusterQueue that preempts nothing (Kueue's default policies, ``Never``): no targets."""
    return "NoCandidates", 0


# --- The ClusterQueue's quota and its cohort's -----------------------------------------------------------------

@dataclass(frozen=True)
class Quota:
    nominal: float
    borrowing_limit: Optional[float] = None
    lending_limit: Optional[float] = None

    @property
    def local(self) -> float:
        """``localQuota``: what the lending limit keeps out of the cohort's reach."""
        return max(0, self.nominal - self.lending_limit) if self.lending_limit is not None else 0


def _quotas(cluster_queue: Mapping) -> dict[tuple[str, str], Quota]:
    quotas = {}
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for entry in flavor.get("resources") or []:
                name = entry["name"]
                limits = [kueue_value(name, entry[k]) if entry.get(k) is not None else None
                          for k in ("borrowingLimit", "lendingLimit")]
                quotas[(flavor["name"], name)] = Quota(kueue_value(name, entry["nominalQuota"]), *limits)
    return quotas


class QueueSnapshot:
    """One ClusterQueue as the scheduler sees it (``ClusterQueueSnapshot``): its resource groups, its quota, its
    usage per (flavor, resource) in Kueue's units, and, with a ``cohortName``, its cohort: the other
    ClusterQueues of that cohort (``neighbours``, each a manifest and its usage) under one Cohort with no quota
    of its own; ``unbounded_cohort``: neighbours that could lend anything (what a queue may at best borrow);
    ``fair_sharing``: Kueue's fair sharing is on (it is off unless configured)."""

    def __init__(self, cluster_queue: Mapping, usage: Optional[Mapping[tuple[str, str], int]] = None, *,
                 neighbours: Sequence[tuple[Mapping, Mapping[tuple[str, str], int]]] = (),
                 unbounded_cohort: bool = False, fair_sharing: bool = False):
        spec = cluster_queue.get("spec") or {}
        self.name = cluster_queue["metadata"]["name"]
        self.groups = [(list(g.get("coveredResources") or []), [f["name"] for f in g.get("flavors") or []])
                       for g in spec.get("resourceGroups") or []]
        self.quotas = _quotas(cluster_queue)
        self.usage = dict(usage or {})
        self.in_cohort = bool(spec.get("cohortName"))
        fungibility = spec.get("flavorFungibility") or {}
        self.when_can_borrow = fungibility.get("whenCanBorrow", "MayStopSearch")
        self.when_can_preempt = fungibility.get("whenCanPreempt", "TryNextFlavor")
        self.preference = fungibility.get("preference")
        preemption = spec.get("preemption") or {}
        borrow_within = (preemption.get("borrowWithinCohort") or {}).get("policy", "Never")
        reclaim_within = preemption.get("reclaimWithinCohort", "Never")
        # canPreemptWhileBorrowing
        self.can_preempt_while_borrowing = borrow_within != "Never" or (fair_sharing and reclaim_within != "Never")
        self.covers_pods = self.group_of(PODS) is not None
        self._cohort_quota: dict[tuple[str, str], float] = {}
        self._cohort_usage: dict[tuple[str, str], float] = {}
        if self.in_cohort:
            members = [(self.quotas, self.usage)] + [(_quotas(m), u) for m, u in neighbours]
            for quotas, used in members:
                for fr, quota in quotas.items():
                    self._cohort_quota[fr] = self._cohort_quota.get(fr, 0) + quota.nominal - quota.local
                    lent = max(0, used.get(fr, 0) - quota.local)
                    self._cohort_usage[fr] = self._cohort_usage.get(fr, 0) + lent
            if unbounded_cohort:
                self._cohort_quota = {fr: UNLIMITED for fr in self._cohort_quota}

    def group_of(self, resource: str) -> Optional[tuple[list[str], list[str]]]:
        """``RGByResource``."""
        return next((g for g in self.groups if resource in g[0]), None)

    def _quota(self, fr: tuple[str, str]) -> Quota:
        return self.quotas.get(fr, Quota(0))

    def _local_available(self, fr) -> float:
        return max(0, self._quota(fr).local - self.usage.get(fr, 0))

    def available(self, fr) -> float:
        """``available``: what is left for this ClusterQueue, borrowing included."""
        quota, used = self._quota(fr), self.usage.get(fr, 0)
        if not self.in_cohort:
            return quota.nominal - used
        parent = self._cohort_quota.get(fr, 0) - self._cohort_usage.get(fr, 0)
        if quota.borrowing_limit is not None:
            stored = quota.nominal - quota.local
            parent = min(parent, stored - max(0, used - quota.local) + quota.borrowing_limit)
        return self._local_available(fr) + parent

    def potential_available(self, fr) -> float:
        """``potentialAvailable``: the most this ClusterQueue could ever have, with no usage anywhere."""
        quota = self._quota(fr)
        if not self.in_cohort:
            return quota.nominal
        most = quota.local + self._cohort_quota.get(fr, 0)
        if quota.borrowing_limit is not None:
            most = min(most, quota.nominal + quota.borrowing_limit)
        return most

    def lowest_subtree_that_fits(self, fr, amount: int) -> tuple[int, bool]:
        """``classical.FindHeightOfLowestSubtreeThatFits``: the borrowing level (0: within the ClusterQueue's own
        quota, 1: from the cohort) and whether a reclaim in the cohort may help."""
        borrowing = self._quota(fr).nominal < self.usage.get(fr, 0) + amount
        if not borrowing or not self.in_cohort:
            return 0, self.in_cohort
        return 1, False


# --- A pod set against a flavor's node labels and taints -------------------------------------------------------

def _tolerates(toleration: Mapping, taint: Mapping) -> bool:
    """``Toleration.ToleratesTaint``."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return toleration.get("value", "") == taint.get("value", "")


def untolerated_taint(taints: Sequence[Mapping], tolerations: Sequence[Mapping]) -> Optional[str]:
    """``corev1helpers.FindMatchingUntoleratedTaint`` over the NoSchedule and NoExecute taints, as Kueue prints
    the taint (``{key value effect <nil>}``)."""
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return f"{{{taint.get('key', '')} {taint.get('value', '')} {taint.get('effect', '')} <nil>}}"
    return None


def label_requirement_matches(requirement: Mapping, labels: Mapping[str, str]) -> bool:
    """One ``matchExpressions`` requirement against labels (``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, and
    a node selector's ``Gt`` and ``Lt``)."""
    key, operator, values = requirement["key"], requirement["operator"], requirement.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt") and key in labels:
        label, bound = int(labels[key]), int(values[0])
        return label > bound if operator == "Gt" else label < bound
    return False


def selector_matches(pod: Mapping, labels: Mapping[str, str]) -> bool:
    """``flavorSelector`` then ``RequiredNodeAffinity.Match`` against a node with the flavor's labels: the pod's
    ``nodeSelector`` and required node affinity, each cut to the flavor's own label keys (a term left empty
    matches every flavor)."""
    keys = set(labels)
    if any(labels.get(k) != v for k, v in (pod.get("nodeSelector") or {}).items() if k in keys):
        return False
    required = (((pod.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = []
    for term in required.get("nodeSelectorTerms") or []:
        kept = [e for e in term.get("matchExpressions") or [] if e["key"] in keys]
        if not kept:
            return True
        terms.append(kept)
    return not terms or any(all(label_requirement_matches(e, labels) for e in term) for term in terms)


# --- The assignment --------------------------------------------------------------------------------------------

@dataclass
class FlavorChoice:
    """``FlavorAssignment``: the flavor a resource takes, and how (:data:`MODE_NAMES`)."""

    flavor: str
    mode: int
    borrow: int = 0


@dataclass
class Status:
    """Why a pod set's flavors do not fit at once (none: they do)."""

    reasons: list[str] = field(default_factory=list)

    @property
    def fit(self) -> bool:
        return not self.reasons

    def message(self) -> str:
        return ", ".join(sorted(self.reasons))


@dataclass
class PodSetAssignment:
    name: str
    count: int
    requests: dict[str, int]
    """The pod set's whole request (its count of pods), in Kueue's units."""
    flavors: dict[str, FlavorChoice]
    status: Status

    @property
    def mode(self) -> int:
        """``PodSetAssignment.RepresentativeMode``."""
        if self.status.fit:
            return FIT
        if not self.flavors:
            return NO_FIT
        return min(choice.mode for choice in self.flavors.values())

    def to_api(self) -> dict:
        """``toAPI``: what the Workload's ``status.admission.podSetAssignments`` holds."""
        return {"name": self.name, "flavors": {r: c.flavor for r, c in sorted(self.flavors.items())},
                "resourceUsage": {r: kueue_string(r, self.requests[r]) for r in sorted(self.flavors)},
                "count": self.count}


@dataclass
class Assignment:
    pod_sets: list[PodSetAssignment]
    usage: dict[tuple[str, str], int]
    """What the assignment takes, per (flavor, resource)."""
    expected: int
    """The Workload's pod sets: an assignment of fewer was cut short (:attr:`complete`)."""

    @property
    def mode(self) -> int:
        """``Assignment.RepresentativeMode``: the worst of its pod sets' (NoFit for none)."""
        return min((p.mode for p in self.pod_sets), default=NO_FIT)

    @property
    def borrowing(self) -> int:
        """``Assignment.Borrowing``: the deepest borrowing any of its flavors needs."""
        return max((c.borrow for p in self.pod_sets for c in p.flavors.values()), default=0)

    @property
    def complete(self) -> bool:
        return len(self.pod_sets) == self.expected

    @property
    def admits(self) -> bool:
        """Kueue reserves quota for it: it fits, and names every pod set (else the Workload CRD refuses it)."""
        return self.mode == FIT and self.complete

    def message(self) -> str:
        """``Assignment.Message``: why it does not fit, pod set by pod set."""
        said = []
        for one in self.pod_sets:
            if one.status.fit:
                continue
            said.append(f"couldn't assign flavors to pod set {one.name}: {one.status.message()}")
        return "; ".join(said)


def fnv1a64(name: str) -> int:
    value = 0xcbf29ce484222325
    for byte in name.encode():
        value = ((value ^ byte) * 0x100000001b3) % 2 ** 64
    return value


def kueue_order(resources: Iterable[str]) -> list[str]:
    """The order Kueue walks a pod set's resources in (``SliceRequests``, on by default in 0.19: by the FNV-1a
    hash of the name, then the name)."""
    return sorted(resources, key=lambda r: (fnv1a64(r), r))


def total_requests(pod_set: PodSet) -> dict[str, int]:
    """``totalRequestsFromPodSets``: one pod's requests, in Kueue's units, times the pod set's count."""
    return {r: kueue_value(r, amount) * pod_set.count for r, amount in pod_set.requests.items()}


class FlavorAssigner:
    """``FlavorAssigner`` for one Workload in one ClusterQueue. ``flavors``: the ResourceFlavors by name;
    ``strategy``: the Kueue's ``resources.quotaCheckStrategy`` (``IgnoreUndeclared`` takes effect only with
    the QuotaCheckStrategy gate, on by default in 0.19); ``oracle``: whether preemption could make room
    (default: it could not, :func:`no_candidates`)."""

    def __init__(self, queue: QueueSnapshot, flavors: Mapping[str, Mapping], strategy: str = BLOCK_UNDECLARED,
                 oracle: Oracle = no_candidates):
        self.queue, self.flavors, self.oracle = queue, flavors, oracle
        self.ignore_undeclared = strategy == IGNORE_UNDECLARED

    def assign(self, pod_sets: Sequence[PodSet], groups: Optional[Sequence[Optional[str]]] = None) -> Assignment:
        """``assignFlavors``. ``groups``: each pod set's topology group (``podSetGroupName``), None for its own."""
        requests = [total_requests(p) for p in pod_sets]
        if self.queue.covers_pods:
            for one, asked in zip(pod_sets, requests):
                asked[PODS] = one.count
        assignment = Assignment([], {}, len(pod_sets))
        grouped: dict[str, list[int]] = {}
        for index in range(len(pod_sets)):
            key = groups[index] if groups and groups[index] is not None else str(index)
            grouped.setdefault(key, []).append(index)
        for ids in grouped.values():
            asked: dict[str, int] = {}
            for i in ids:
                for resource, amount in requests[i].items():
                    asked[resource] = asked.get(resource, 0) + amount
            chosen: Optional[dict[str, FlavorChoice]] = {}
            status = Status()
            for resource in kueue_order(asked):
                if self.queue.group_of(resource) is None and (asked[resource] == 0 or self.ignore_undeclared):
                    continue
                if resource in chosen:
                    continue
                found, found_status = self._find_flavor(ids, pod_sets, asked, resource, assignment.usage)
                if not found:  # no flavor for this resource: the group's status is that search's
                    chosen, status = None, found_status or Status()
                    break
                chosen.update(found)
                if found_status is not None:
                    status.reasons += found_status.reasons
            failed = False
            for i in ids:
                mine = {r: chosen[r] for r in requests[i] if chosen and r in chosen} if requests[i] else {}
                one = PodSetAssignment(pod_sets[i].name, pod_sets[i].count, requests[i], mine,
                                       Status(list(status.reasons)))
                assignment.pod_sets.append(one)
                for resource, choice in mine.items():
                    fr = (choice.flavor, resource)
                    assignment.usage[fr] = assignment.usage.get(fr, 0) + requests[i][resource]
                if requests[i] and not mine:
                    failed = True
            if failed:  # atLeastOnePodsAssignmentFailed: the later pod sets are not looked at
                return assignment
        return assignment

    def _find_flavor(self, ids: Sequence[int], pod_sets: Sequence[PodSet], asked: Mapping[str, int],
                     resource: str, assumed: Mapping[tuple[str, str], int]):
        """``findFlavorForPodSets``: the flavor of ``resource``'s group that all the group's resources take."""
        group = self.queue.group_of(resource)
        if group is None:
            return None, Status([f"resource {resource} unavailable in ClusterQueue"])
        covered, flavor_names = group
        wanted = {r: a for r, a in asked.items() if r in covered}
        status = Status()
        best: Optional[dict[str, FlavorChoice]] = None
        best_mode = (_NO_FIT, UNLIMITED)
        for flavor in flavor_names:
            refused = self._check_flavor(flavor, [pod_sets[i] for i in ids])
            if refused:
                status.reasons.append(refused)
                continue
            choices: dict[str, FlavorChoice] = {}
            mode = (_FIT, 0)
            for name in kueue_order(wanted):
                fr = (flavor, name)
                possible, borrow, reasons = self._fits(fr, assumed.get(fr, 0), wanted[name])
                status.reasons += reasons
                if is_preferred(mode, (possible, borrow), self.queue.preference):
                    mode = (possible, borrow)
                if mode[0] == _NO_FIT:
                    continue
                choices[name] = FlavorChoice(flavor, _assignment_mode(possible), borrow)
            if not self._try_next(mode):
                best, best_mode = choices, mode
                break
            if is_preferred(mode, best_mode, self.queue.preference):
                best, best_mode = choices, mode
        if best_mode[0] == _FIT:
            return best, None
        return best, status

    def _check_flavor(self, name: str, pod_sets: Sequence[PodSet]) -> Optional[str]:
        """``checkFlavorForPodSets``: the reason a flavor is not for these pod sets, or None."""
        flavor = self.flavors.get(name)
        if flavor is None:
            return f"flavor {name} not found"
        spec = flavor.get("spec") or {}
        for one in pod_sets:
            taint = untolerated_taint(spec.get("nodeTaints") or [],
                                      [*(one.pod.get("tolerations") or []), *(spec.get("tolerations") or [])])
            if taint:
                return f"untolerated taint {taint} in flavor {name}"
            if not selector_matches(one.pod, spec.get("nodeLabels") or {}):
                return f"flavor {name} doesn't match node affinity"
        return None

    def _fits(self, fr: tuple[str, str], assumed: int, request: int) -> tuple[int, int, list[str]]:
        """``fitsResourceQuota``: how ``request`` fits in the flavor beside ``assumed`` (the Workload's pod sets
        before it), its borrowing level, and why it does not fit at once."""
        flavor, resource = fr
        available, most = self.queue.available(fr), self.queue.potential_available(fr)
        amount = assumed + request
        if amount > most:
            return _NO_FIT, 0, [
                f"insufficient quota for {resource} in flavor {flavor}, previously considered podsets requests "
                f"({kueue_string(resource, assumed)}) + current podset request ({kueue_string(resource, request)}) "
                f"> maximum capacity ({_amount(resource, most)})"]
        borrow, may_reclaim = self.queue.lowest_subtree_that_fits(fr, amount)
        if amount <= available:
            return _FIT, borrow, []
        reasons = [f"insufficient unused quota for {resource} in flavor {flavor}, "
                   f"{_amount(resource, amount - available)} more needed"]
        if self.queue._quota(fr).nominal >= amount or may_reclaim or self.queue.can_preempt_while_borrowing:
            possibility, after = self.oracle(flavor, resource, amount)
            return POSSIBILITIES[possibility], after, reasons
        return _NO_FIT, borrow, reasons

    def _try_next(self, mode: tuple[int, float]) -> bool:
        """``shouldTryNextFlavor`` (FlavorFungibility, on by default)."""
        if mode[0] in (_NO_FIT, _NO_CANDIDATES):
            return True
        if mode[0] in (_PREEMPT, _RECLAIM) and self.queue.when_can_preempt == "TryNextFlavor":
            return True
        return mode[1] != 0 and self.queue.when_can_borrow == "TryNextFlavor"



def is_preferred(a: tuple[int, float], b: tuple[int, float], preference: Optional[str] = None) -> bool:
    """``isPreferred``: mode ``a`` (preemption mode, borrowing level) is better than ``b``: the better preemption
    mode, then the shallower borrowing, unless ``preference`` (the ClusterQueue's ``flavorFungibility``) is
    ``PreemptionOverBorrowing``; a flavor without preemption candidates ranks below any viable one."""
    if a[0] == _NO_FIT:
        return False
    if b[0] == _NO_FIT:
        return True
    if (a[0] == _NO_CANDIDATES) != (b[0] == _NO_CANDIDATES):
        return a[0] != _NO_CANDIDATES
    if preference == "PreemptionOverBorrowing":
        return a[1] < b[1] if a[1] != b[1] else a[0] > b[0]
    return a[0] > b[0] if a[0] != b[0] else a[1] < b[1]


def _assignment_mode(possible: int) -> int:
    return {_NO_FIT: NO_FIT, _FIT: FIT}.get(possible, PREEMPT)


def _amount(resource: str, value: float) -> str:
    return "<unlimited>" if value == UNLIMITED else kueue_string(resource, int(value))


# --- Could a queue ever admit a run? ---------------------------------------------------------------------------

def admission_problem(pod_sets: Sequence[PodSet], cluster_queue: Mapping, flavors: Mapping[str, Mapping],
                      strategy: str) -> Optional[str]:
    """Why ``cluster_queue``, empty and lent all its cohort could lend, would never admit a Workload of
    ``pod_sets`` (None: it would), in Kueue's words where Kueue has them."""
    queue = QueueSnapshot(cluster_queue, unbounded_cohort=True)
    assignment = FlavorAssigner(queue, flavors, strategy).assign(pod_sets)
    if assignment.admits:
        return None
    if assignment.mode != FIT:
        return assignment.message()
    stuck = assignment.pod_sets[-1]
    return (f"pod set {stuck.name} asks for {', '.join(sorted(stuck.requests))}, none of which ClusterQueue "
            f"{queue.name} covers, so it takes no flavor ({strategy} skips what the queue does not cover) and "
            f"Kueue's admission would name {len(assignment.pod_sets)} of the Workload's {assignment.expected} pod "
            "sets, which the Workload CRD refuses: Kueue never admits the run")


def requests_over_limits(pod_sets: Sequence[Mapping]) -> Optional[str]:
    """``workload.ValidateResources``: the containers whose requests exceed their limits, as Kueue words it (None:
    none do). Kueue leaves such a Workload inadmissible."""
    errors = []
    for i, one in enumerate(pod_sets):
        pod = (one.get("template") or {}).get("spec") or {}
        for kind in ("initContainers", "containers"):
            for j, container in enumerate(pod.get(kind) or []):
                resources = container.get("resources") or {}
                limits = resources.get("limits") or {}
                over = [r for r, v in (resources.get("requests") or {}).items()
                        if r in limits and kueue_value(r, v) > kueue_value(r, limits[r])]
                if over:
                    names = ",".join(f'"{r}"' for r in sorted(over))
                    errors.append(f"spec.podSets[{i}].template.spec.{kind}[{j}]: Invalid value: [{names}]: "
                                  "requests must not exceed its limits")
    if not errors:
        return None
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def used_by(admissions: Iterable[Mapping]) -> dict[tuple[str, str], int]:
    """What admitted Workloads take of their ClusterQueue, per (flavor, resource): their ``podSetAssignments``'
    ``resourceUsage`` (``totalRequestsFromAdmission``)."""
    used: dict[tuple[str, str], int] = {}
    for admission in admissions:
        for one in admission.get("podSetAssignments") or []:
            for resource, amount in (one.get("resourceUsage") or {}).items():
                fr = (one["flavors"][resource], resource)
                used[fr] = used.get(fr, 0) + kueue_value(resource, amount)
    return used

