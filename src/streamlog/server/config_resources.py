"""ListConfigResources (key 74) on the wire: the resources that have configs, by type
(kafka-python's `list_config_resources`, Kafka's admin client's listConfigResources;
version 0 was ListClientMetricsResources, KIP-714; version 1 takes resource types,
KIP-1142), answered as Kafka 4.1's broker answers it (KafkaApis.handleListConfigResources,
ListConfigResourcesRequest.supportedResourceTypes).

The types a version knows: 0 CLIENT_METRICS only (its request names none); 1 TOPIC,
BROKER, BROKER_LOGGER, CLIENT_METRICS and GROUP. No type asked means every type the version
knows; a type asked that it does not know makes the whole answer UNSUPPORTED_VERSION, with
no resource. The resources, by type in Kafka's order whatever the order asked, each type
once: GROUP, the groups with dynamic configs (none: groups here have no configs);
CLIENT_METRICS, the client metrics subscriptions (none are kept); BROKER_LOGGER and BROKER,
each broker's id (the database's one broker, 0, or every broker of a cluster, down ones
too, as Kafka lists every registered broker); TOPIC, every topic, the internal ones
included. Brokers are listed by id and topics by name (Kafka's order is its maps').
"""
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from .protocol import NO_THROTTLE, build, response_types

LIST_CONFIG_RESOURCES = 74
# Kafka's ConfigResource.Type ids.
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
_KNOWN = {0: (CLIENT_METRICS,), 1: (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)}
# The order Kafka's handler lists the types in.
_LISTING_ORDER = (GROUP, CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC)


class ConfigResourcesHandlers:
    def __init__(self, broker, broker_ids):
        """broker_ids(): the ids of every broker of the cluster (or the one broker)."""
        self.broker = broker
        self._broker_ids = broker_ids

    @property
    def table(self):
        return {LIST_CONFIG_RESOURCES: self.list_config_resources}

    def list_config_resources(self, version, body, context):
        cls, types = response_types(LIST_CONFIG_RESOURCES, version)
        known = _KNOWN[min(version, 1)]
        asked = {int(t) for t in getattr(body, "resource_types", ())} or set(known)
        if not asked <= set(known):
            return build(cls, throttle_time=NO_THROTTLE,
                         error_code=ErrorCode.unsupported_version, config_resources=())
        resources = [build(types.ConfigResource, resource_name=name, resource_type=i8(kind))
                     for kind in _LISTING_ORDER if kind in asked
                     for name in self._names(kind)]
        return build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                     config_resources=tuple(resources))

    def _names(self, kind):
        if kind in (BROKER, BROKER_LOGGER):
            return [str(node) for node in sorted(self._broker_ids())]
        if kind == TOPIC:
            return sorted(self.broker.topics())
        return []   # GROUP, CLIENT_METRICS: none here has configs
