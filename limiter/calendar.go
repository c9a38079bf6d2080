package limiter

import "time"

// Month is the interval of a calendar month: a fixed-window limiter with
// exactly this interval (the mean Gregorian month, 30.436875 days) counts
// calendar months in UTC, each starting on the 1st at 00:00 UTC
// (calendar.lua). Other algorithms take it as its length.
const Month = 2629746 * time.Second

// MonthStart is the start of the calendar month (UTC) holding t, and
// NextMonth the start of the one after it: a Month window's bounds.
func MonthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// NextMonth is the start of the calendar month (UTC) after t's.
func NextMonth(t time.Time) time.Time { return MonthStart(t).AddDate(0, 1, 0) }
