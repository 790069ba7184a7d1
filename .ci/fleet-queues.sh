# Sourced by .ci/test and .ci/run. Every jobhost host on RabbitMQ declares the fleet's own
# queues (the operators' orders, the schedulers' lead, the recorded attempts, the batch log), and the hosts the tests and the
# benchmarks run leave them behind: on exit, delete those that were not there before, so
# the broker on 5672 is left as it was found.
# The example plugins email-sender(-js, -py) declare the schedules email.DailyDigest(Js,
# Py), whose history any host that leads the schedulers with them loaded reads, and so
# declares.
fleet_queues=(jobhost.control jobhost.scheduler.leader jobhost.recordings jobhost.batches
    jobhost.schedule.email.DailyDigest.fired jobhost.schedule.email.DailyDigest.ended
    jobhost.schedule.email.DailyDigestJs.fired jobhost.schedule.email.DailyDigestJs.ended
    jobhost.schedule.email.DailyDigestPy.fired jobhost.schedule.email.DailyDigestPy.ended)
queues_before=""
if command -v rabbitmqctl >/dev/null 2>&1; then
    queues_before=$(rabbitmqctl list_queues -q name 2>/dev/null || true)
fi
forget_fleet_queues() {
    command -v rabbitmqctl >/dev/null 2>&1 || return 0
    local queue
    for queue in "${fleet_queues[@]}"; do
        if ! grep -qxF "$queue" <<<"$queues_before"; then
            rabbitmqctl delete_queue "$queue" >/dev/null 2>&1 || true
        fi
    done
}
trap forget_fleet_queues EXIT
