#!/bin/sh
# Kafka for compose with SASL and ACLs (docs/security.md), the way `precast stack up --secure`
# runs it: clients authenticate with SCRAM-SHA-512 as one user per component, Kafka's
# StandardAuthorizer allows only the ACLs schemas/access.py grants (the kafka-init service
# creates the users and ACLs), and nothing is allowed where no ACL says so.
#   SASL_PLAINTEXT :9092  clients and the brokers (SCRAM; the compose networks are internal)
#   CONTROLLER     :9093  KRaft (SASL/PLAIN with a static user: controllers cannot use SCRAM,
#                         whose credentials live in the metadata they serve)
# The super users `broker` and `admin` are formatted into the storage before the first start.
# No password is an argument of any process (`ps` shows arguments): they come from the
# environment, go to 0600 files, and reach kafka-storage through a Java argument file (@file).
set -eu
umask 077

KAFKA_HOME=${KAFKA_HOME:-/opt/kafka}
CONF_DIR=${KAFKA_CONF_DIR:-/tmp/precast-kafka}
DATA_DIR=${KAFKA_DATA_DIR:-/var/lib/kafka/data}
: "${KAFKA_NODE_ID:?}" "${KAFKA_ADVERTISED_HOST:?}" "${KAFKA_CONTROLLER_QUORUM_VOTERS:?}"
: "${CLUSTER_ID:?}" "${KAFKA_BROKER_PASSWORD:?}" "${KAFKA_ADMIN_PASSWORD:?}"
PORT=${KAFKA_PORT:-9092}
CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-9093}

for pw in "$KAFKA_BROKER_PASSWORD" "$KAFKA_ADMIN_PASSWORD"; do
  # They are written unquoted into JAAS lines and --add-scram: URL-safe characters only.
  case "$pw" in
    *[!A-Za-z0-9_-]*) bad=1 ;;
    *) [ "${#pw}" -ge 16 ] && bad=0 || bad=1 ;;
  esac
  if [ "$bad" = 1 ]; then
    echo "kafka-sasl: KAFKA_BROKER_PASSWORD and KAFKA_ADMIN_PASSWORD need 16+ of A-Z a-z 0-9 _ -" >&2
    exit 2
  fi
done

mkdir -p "$CONF_DIR" "$DATA_DIR"
conf="$CONF_DIR/server.properties"
scram="org.apache.kafka.common.security.scram.ScramLoginModule required"
plain="org.apache.kafka.common.security.plain.PlainLoginModule required"
cat > "$conf" <<PROPS
node.id=$KAFKA_NODE_ID
process.roles=broker,controller
log.dirs=$DATA_DIR
listeners=SASL_PLAINTEXT://:$PORT,CONTROLLER://:$CONTROLLER_PORT
advertised.listeners=SASL_PLAINTEXT://$KAFKA_ADVERTISED_HOST:$PORT
listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT
inter.broker.listener.name=SASL_PLAINTEXT
controller.listener.names=CONTROLLER
controller.quorum.voters=$KAFKA_CONTROLLER_QUORUM_VOTERS
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=$scram username="broker" password="$KAFKA_BROKER_PASSWORD";
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config=$plain username="broker" password="$KAFKA_BROKER_PASSWORD" user_broker="$KAFKA_BROKER_PASSWORD";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:broker;User:admin
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
${KAFKA_PROPERTIES:-}
PROPS

# What the healthcheck (and an operator in the container) connects with: the admin user.
cat > "$CONF_DIR/admin.properties" <<PROPS
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=$scram username="admin" password="$KAFKA_ADMIN_PASSWORD";
PROPS

if [ ! -f "$DATA_DIR/meta.properties" ]; then
  args="$CONF_DIR/format.args"
  # printf is a shell builtin (dash, busybox ash): no process, so no argv, holds them.
  printf '%s\n' --add-scram "SCRAM-SHA-512=[name=broker,password=$KAFKA_BROKER_PASSWORD]" \
    --add-scram "SCRAM-SHA-512=[name=admin,password=$KAFKA_ADMIN_PASSWORD]" > "$args"
  "$KAFKA_HOME/bin/kafka-storage.sh" format --ignore-formatted -t "$CLUSTER_ID" -c "$conf" "@$args"
  rm -f "$args"
fi
# The broker reads nothing from the environment after this: keep its passwords out of it.
unset KAFKA_BROKER_PASSWORD KAFKA_ADMIN_PASSWORD
exec "$KAFKA_HOME/bin/kafka-server-start.sh" "$conf"
