"""The coverage table: one row per kill or loss point (and per race, per batch of random schedules).

Columns: runs (cells), converged (within 2 runs after the fault), leaks, foreign containers touched,
reruns needed (the most any cell of the row needed), and what went wrong. The last line is exactly

    faults: P points, R runs, C converged, L leaks, F foreign touched
"""

import json


def cell_from_dict(data):
    """A Cell as write_json wrote it (to merge the reports of several processes)."""
    from tests.faults.cells import Cell
    cell = Cell(data['row'], data['kind'], data['workspaces'], data['variant'])
    for key in ('converged', 'reached', 'reruns', 'leaks', 'foreign', 'violations', 'notes', 'seconds', 'seed',
                'commands'):
        setattr(cell, key, data[key])
    return cell


def rows(cells):
    """Rows in the order their first cell ran."""
    order, grouped = [], {}
    for cell in cells:
        if cell.row not in grouped:
            order.append(cell.row)
            grouped[cell.row] = []
        grouped[cell.row].append(cell)
    return [(row, grouped[row]) for row in order]


def replay_command(cell):
    """The command that runs a seed's schedule again, where it ran: a fleet soak's seed on its own place."""
    if cell.row.startswith('random schedules: '):
        return 'python -m tests.faults soak-fleet --schedules 1 --first-seed %d' % cell.seed
    return 'python -m tests.faults replay --seed %d' % cell.seed


def totals(cells, uncovered=()):
    points = set(cell.row for cell in cells if cell.kind in ('kill', 'lost')) | set(row for row, dummy in uncovered)
    leaks = set(leak.split(':')[0] for cell in cells for leak in cell.leaks)
    foreign = set(f.split(' changed')[0].split(' is gone')[0] for cell in cells for f in cell.foreign)
    return {'points': len(points), 'runs': len(cells), 'converged': sum(1 for c in cells if c.converged),
            'leaks': len(leaks), 'foreign': len(foreign), 'failed': sum(1 for c in cells if not c.ok),
            'uncovered': len(uncovered)}


def summary_line(total):
    return 'faults: %d points, %d runs, %d converged, %d leaks, %d foreign touched' % (
        total['points'], total['runs'], total['converged'], total['leaks'], total['foreign'])


def table(cells, uncovered=()):
    """The report as text lines, the summary line last."""
    head = ('point', 'runs', 'converged', 'leaks', 'foreign', 'reruns', 'problems')
    body = []
    for row, group in rows(cells):
        problems = []
        for cell in group:
            if not cell.reached:
                problems.append('point not reached')
            if not cell.ran_shipped_playbooks:
                problems.append('not run by the shipped playbooks: %s' % (cell.commands or 'no run'))
            for name, found in sorted(cell.violations.items()):
                problems.append('%s: %s' % (name, found[0]))
            problems.extend(cell.leaks[:1])
            problems.extend(cell.foreign[:1])
            if not cell.converged:
                problems.extend(cell.notes[-1:])
            if cell.seed is not None and not cell.ok:
                problems.append('replay: %s' % replay_command(cell))
        body.append((row, str(len(group)), str(sum(1 for c in group if c.converged)),
                     str(sum(len(c.leaks) for c in group)), str(sum(len(c.foreign) for c in group)),
                     str(max(c.reruns for c in group)), '; '.join(dict.fromkeys(problems)) or '-'))
    for row, why in uncovered:
        body.append((row, '0', '0', '0', '0', '-', 'not covered: %s' % why))
    widths = [max([len(head[i])] + [len(line[i]) for line in body]) for i in range(len(head) - 1)]
    lines = []
    for line in [head] + body:
        cols = [line[0].ljust(widths[0])] + [line[i].rjust(widths[i]) for i in range(1, len(head) - 1)]
        lines.append('  '.join(cols + [line[-1]]))
    lines.insert(1, '-' * min(160, sum(widths) + 2 * len(widths) + 10))
    lines.append(summary_line(totals(cells, uncovered)))
    return lines


def write_json(path, cells, uncovered=(), extra=None):
    data = {'totals': totals(cells, uncovered), 'cells': [c.as_dict() for c in cells],
            'uncovered': [{'point': row, 'why': why} for row, why in uncovered]}
    data.update(extra or {})
    with open(path, 'w') as out:
        json.dump(data, out, indent=1)
